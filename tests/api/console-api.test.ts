/**
 * The web console's server side over the real app (fake driver harness): static files at `/`, sign-in with a key,
 * the session cookie's flags, the CSRF header, the one-time login link and the metrics route.
 */
import { ErrorEnvelopeSchema, SandboxMetricsSchema } from '@burrow/contract';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Harness, startHarness } from './api-harness.js';

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => {
  await h?.close();
});

const code = (res: LightMyRequestResponse) => ErrorEnvelopeSchema.parse(res.json()).error.code;

async function signIn(apiKey: string): Promise<{ res: LightMyRequestResponse; cookie: string }> {
  const res = await h.burrow.app.inject({ method: 'POST', url: '/v1/console/session', payload: { apiKey } });
  const header = String(res.headers['set-cookie'] ?? '');
  return { res, cookie: header.split(';')[0] ?? '' };
}

describe('console', () => {
  it('serves the built console at / without a key, with a CSP', async () => {
    const res = await h.burrow.app.inject({ method: 'GET', url: '/' });
    expect(res.statusCode).toBe(200);
    expect(res.body).toContain('<div id="app">');
    expect(res.headers['content-security-policy']).toContain("default-src 'self'");
  });

  it('signs in with a key: an HttpOnly SameSite=Strict cookie, and the answer names no secret', async () => {
    const { res, cookie } = await signIn(h.adminSecret);
    expect(res.statusCode).toBe(200);
    expect(res.body).not.toContain(h.adminSecret);
    expect(res.json()).toMatchObject({ role: 'admin', tenantId: 'default' });
    const header = String(res.headers['set-cookie']);
    expect(header).toMatch(/HttpOnly/);
    expect(header).toMatch(/SameSite=Strict/);
    const me = await h.burrow.app.inject({ method: 'GET', url: '/v1/console/session', headers: { cookie } });
    expect(me.statusCode).toBe(200);
    expect(me.json().keyId).toMatch(/^key_/);
  });

  it('refuses a wrong key at sign-in and sets no cookie', async () => {
    const { res } = await signIn('bk_wrong');
    expect(res.statusCode).toBe(401);
    expect(res.headers['set-cookie']).toBeUndefined();
  });

  it('takes state changes by cookie only with the CSRF header', async () => {
    const { cookie } = await signIn(h.adminSecret);
    const payload = { name: 'from-console', role: 'member' };
    const bare = await h.burrow.app.inject({ method: 'POST', url: '/v1/keys', headers: { cookie }, payload });
    expect(bare.statusCode).toBe(403);
    expect(code(bare)).toBe('forbidden');
    expect(bare.json().error.hint).toContain('Bearer');
    const withHeader = await h.burrow.app.inject({
      method: 'POST',
      url: '/v1/keys',
      headers: { cookie, 'x-burrow-csrf': '1' },
      payload,
    });
    expect(withHeader.statusCode).toBe(201);
  });

  it('refuses a cookie WebSocket upgrade from another origin', async () => {
    const { cookie } = await signIn(h.adminSecret);
    const res = await h.burrow.app.inject({
      method: 'GET',
      url: '/v1/sandboxes',
      headers: { cookie, upgrade: 'websocket', origin: 'http://evil.example', host: 'localhost:80' },
    });
    expect(res.statusCode).toBe(403);
  });

  it('signs in once with a login link, which then expires', async () => {
    const link = await h.burrow.app.inject({
      method: 'POST',
      url: '/v1/console/login-links',
      headers: h.admin,
    });
    expect(link.statusCode).toBe(201);
    const path = link.json().path as string;
    expect(path).toMatch(/^\/console\/login\?token=/);
    const first = await h.burrow.app.inject({ method: 'GET', url: path });
    expect(first.statusCode).toBe(303);
    expect(first.headers.location).toBe('/');
    const cookie = String(first.headers['set-cookie']).split(';')[0] ?? '';
    expect(
      (await h.burrow.app.inject({ method: 'GET', url: '/v1/console/session', headers: { cookie } })).statusCode,
    ).toBe(200);
    const again = await h.burrow.app.inject({ method: 'GET', url: path });
    expect(again.statusCode).toBe(303);
    expect(again.headers.location).toBe('/?signin=link-expired');
    expect(again.headers['set-cookie']).toBeUndefined();
  });

  it('signs out by expiring the cookie', async () => {
    const res = await h.burrow.app.inject({ method: 'DELETE', url: '/v1/console/session' });
    expect(res.statusCode).toBe(204);
    expect(String(res.headers['set-cookie'])).toMatch(/Max-Age=0/);
  });

  it('answers a sandbox metrics window (the fake driver reads no cgroups: no samples)', async () => {
    const created = await h.burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: h.admin, payload: {} });
    expect(created.statusCode).toBe(201);
    const id = created.json().id as string;
    const res = await h.burrow.app.inject({ method: 'GET', url: `/v1/sandboxes/${id}/metrics`, headers: h.admin });
    expect(res.statusCode).toBe(200);
    const metrics = SandboxMetricsSchema.parse(res.json());
    expect(metrics.limits.memoryMiB).toBeGreaterThan(0);
    expect(metrics.samples).toEqual([]);
    const missing = await h.burrow.app.inject({
      method: 'GET',
      url: '/v1/sandboxes/sbx_00000000000000000000/metrics',
      headers: h.admin,
    });
    expect(missing.statusCode).toBe(404);
  });
});
