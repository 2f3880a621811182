/**
 * E2B's network options on Burrow's egress policy, through E2B's control plane over the FAKE driver (fast layer):
 * what each option maps to, as Burrow's own API shows it, and the E2B-shaped 400s for what Burrow cannot honour.
 * The enforcement of the policy itself is tested on real runsc in network-api.test.ts.
 */
import type { NetworkPolicy } from '@burrow/contract';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Harness, startHarness } from './api-harness.js';

let h: Harness;
/** Policies the fake driver was asked to apply at runtime. */
const applied: Array<{ sandboxId: string; policy: NetworkPolicy }> = [];

beforeAll(async () => {
  h = await startHarness();
  // The fake driver has no network; here it claims one and records each runtime update (a fake, named as one).
  const fake = h.driver as unknown as {
    capabilities: ReadonlySet<string>;
    updateNetwork(sandboxId: string, policy: NetworkPolicy): Promise<void>;
  };
  fake.capabilities = new Set([...h.driver.capabilities, 'network']);
  fake.updateNetwork = async (sandboxId, policy) => {
    applied.push({ sandboxId, policy });
  };
});
afterAll(async () => h?.close());

const e2b = (method: 'POST' | 'GET' | 'PUT', url: string, payload?: unknown) =>
  h.burrow.e2b.api.inject({
    method,
    url,
    headers: { 'x-api-key': h.adminSecret },
    ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }),
  });

const burrowNetwork = async (id: string) =>
  (await h.burrow.app.inject({ method: 'GET', url: `/v1/sandboxes/${id}`, headers: h.admin })).json().network;

describe('E2B network options → Burrow egress policy', () => {
  test.each([
    ['nothing (the server default)', {}, { mode: 'egress', allowOut: [], denyOut: [] }, true],
    [
      'allow_internet_access: true',
      { allow_internet_access: true },
      { mode: 'egress', allowOut: [], denyOut: [] },
      true,
    ],
    [
      'allow_internet_access: false → denyOut 0.0.0.0/0',
      { allow_internet_access: false },
      { mode: 'egress', allowOut: [], denyOut: ['0.0.0.0/0'] },
      false,
    ],
    [
      'allow_internet_access: false with allowOut → an allowlist',
      { allow_internet_access: false, network: { allowOut: ['pypi.org', '203.0.113.0/24'] } },
      { mode: 'egress', allowOut: ['pypi.org', '203.0.113.0/24'], denyOut: ['0.0.0.0/0'] },
      false,
    ],
    [
      'network lists, with the harmless defaults of the ingress options',
      {
        allow_internet_access: true,
        network: {
          denyOut: ['198.51.100.7'],
          allowOut: ['*.example.com'],
          allowPublicTraffic: true,
          egressProxy: null,
        },
      },
      { mode: 'egress', allowOut: ['*.example.com'], denyOut: ['198.51.100.7'] },
      true,
    ],
  ])('%s', async (_name, body, policy, internet) => {
    const res = await e2b('POST', '/sandboxes', { templateID: 'base', ...body });
    expect(res.statusCode, res.body).toBe(201);
    const id = res.json().sandboxID as string;
    expect(await burrowNetwork(id)).toMatchObject(policy);
    const info = (await e2b('GET', `/sandboxes/${id}`)).json();
    expect(info.allowInternetAccess).toBe(internet);
    expect(info.network).toMatchObject({ allowOut: policy.allowOut, denyOut: policy.denyOut });
  });

  test.each([
    [{ network: { allowOut: ['10.0.0.0/33'] } }, /network\.allowOut\.0: .*10\.0\.0\.0\/33/],
    [{ network: { denyOut: ['2001:db8::/32'] } }, /network\.denyOut\.0: .*2001:db8::\/32/],
    [{ allow_internet_access: false, network: { denyOut: ['exa*mple.com'] } }, /network\.denyOut\.0: .*exa\*mple/],
    [{ network: { allowPublicTraffic: false } }, /allowPublicTraffic: false is not supported by Burrow/],
    [{ network: { maskRequestHost: 'x.example.com' } }, /maskRequestHost is not supported by Burrow/],
    [{ network: { egressProxy: { address: 'proxy.example.com:1080' } } }, /egressProxy is not supported/],
    [{ network: { rules: { 'api.example.com': [{}] } } }, /rules is not supported/],
    [{ network: { allowOutt: ['pypi.org'] } }, /allowOutt/],
  ])('create with %j → E2B 400', async (body, message) => {
    const before = (await e2b('GET', '/v2/sandboxes')).json().length;
    const res = await e2b('POST', '/sandboxes', { templateID: 'base', ...body });
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json()).toEqual({ code: 400, message: expect.stringMatching(message) });
    expect((await e2b('GET', '/v2/sandboxes')).json().length).toBe(before);
  });

  test('PUT /sandboxes/{id}/network replaces the rules on the running sandbox; bad input changes nothing', async () => {
    const created = await e2b('POST', '/sandboxes', { templateID: 'base', allow_internet_access: false });
    const id = created.json().sandboxID as string;

    const opened = await e2b('PUT', `/sandboxes/${id}/network`, { allowOut: ['pypi.org'], denyOut: ['192.0.2.0/24'] });
    expect(opened.statusCode, opened.body).toBe(204);
    const policy = { mode: 'egress', allowOut: ['pypi.org'], denyOut: ['192.0.2.0/24'] };
    expect(applied.at(-1)).toEqual({ sandboxId: id, policy });
    expect(await burrowNetwork(id)).toMatchObject(policy);
    expect((await e2b('GET', `/sandboxes/${id}`)).json().allowInternetAccess).toBe(true);

    const closed = await e2b('PUT', `/sandboxes/${id}/network`, { allow_internet_access: false });
    expect(closed.statusCode, closed.body).toBe(204);
    expect(applied.at(-1)?.policy).toEqual({ mode: 'egress', allowOut: [], denyOut: ['0.0.0.0/0'] });

    const count = applied.length;
    for (const [body, message] of [
      [{ allowOut: ['256.1.1.1'] }, /network\.allowOut\.0: .*256\.1\.1\.1/],
      [{ egressProxy: { address: 'proxy.example.com:1080' } }, /egressProxy is not supported/],
      [{ mode: 'none' }, /mode/],
    ] as const) {
      const res = await e2b('PUT', `/sandboxes/${id}/network`, body);
      expect(res.statusCode, res.body).toBe(400);
      expect(res.json()).toEqual({ code: 400, message: expect.stringMatching(message) });
    }
    expect(applied.length).toBe(count);
    expect(await burrowNetwork(id)).toMatchObject({ allowOut: [], denyOut: ['0.0.0.0/0'] });

    const missing = await e2b('PUT', '/sandboxes/sbx_nosuchsandbox0000/network', { allowOut: [] });
    expect(missing.statusCode, missing.body).toBe(404);
    expect(missing.json().code).toBe(404);
  });
});
