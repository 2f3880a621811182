import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Harness, startHarness } from './api-harness.js';

/**
 * Preview URLs over the FAKE driver (fast layer): the fake's "sandbox ports" are a plain HTTP server on the host's
 * loopback; the real path through a sandbox's router is tests/e2e/preview-urls.test.ts.
 */
describe('preview URLs: access, bad input, wake (fake driver)', () => {
  let h: Harness;
  let upstream: Server;
  let upstreamPort = 0;
  let serverPort = 0;
  let hits = 0;

  const create = async (payload: object = {}) => {
    const res = await h.burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: h.admin, payload });
    expect(res.statusCode, res.body).toBe(201);
    return res.json().id as string;
  };
  const post = (url: string, payload: object = {}, headers = h.admin) =>
    h.burrow.app.inject({ method: 'POST', url, headers, payload });
  const preview = (sandboxId: string, port: number, headers: Record<string, string> = {}) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest(
        {
          host: '127.0.0.1',
          port: serverPort,
          path: '/',
          headers: { host: `${port}-${sandboxId.replace('_', '-')}.localhost:${serverPort}`, ...headers },
        },
        (res) => {
          let body = '';
          res.on('data', (c: Buffer) => {
            body += c.toString();
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        },
      );
      req.on('error', reject);
      req.end();
    });
  const code = (answer: { body: string }) => JSON.parse(answer.body).error.code as string;
  const token = (sandboxId: string) => ({
    'x-burrow-access-token': h.burrow.services.ports?.access.accessToken(sandboxId) ?? '',
  });

  beforeAll(async () => {
    h = await startHarness();
    upstream = createServer((_req, res) => {
      hits += 1;
      res.end('upstream');
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    upstreamPort = (upstream.address() as AddressInfo).port;
    h.driver.ingressHost = '127.0.0.1';
    await h.burrow.app.listen({ host: '127.0.0.1', port: 0 });
    serverPort = (h.burrow.app.server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    upstream?.close();
    await h?.close();
  });

  test('bad input on the API: ports outside 1-65535, ttl without signed, unknown and foreign sandboxes', async () => {
    const id = await create();
    for (const [url, payload] of [
      [`/v1/sandboxes/${id}/ports/0/url`, {}],
      [`/v1/sandboxes/${id}/ports/65536/url`, {}],
      [`/v1/sandboxes/${id}/ports/-1/url`, {}],
      [`/v1/sandboxes/${id}/ports/80/url`, { ttlMs: 5000 }],
      [`/v1/sandboxes/${id}/ports/80/url`, { signed: true, ttlMs: 10 }],
      [`/v1/sandboxes/${id}/ports/80/url`, { public: 'yes' }],
    ] as const) {
      const res = await post(url, payload);
      expect(res.statusCode, `${url} ${res.body}`).toBe(400);
      expect(res.json().error.code).toBe('invalid_request');
    }
    const unknown = await post('/v1/sandboxes/sbx_00000000000000000000/ports/80/url');
    expect(unknown.statusCode).toBe(404);
    const other = await h.burrow.services.keys.create(
      { keyId: 'key_x', tenantId: 'default', role: 'admin' },
      { name: 'other', tenantId: 'other', role: 'member' },
    );
    const foreign = await post(`/v1/sandboxes/${id}/ports/80/url`, {}, { authorization: `Bearer ${other.secret}` });
    expect(foreign.statusCode).toBe(404);
    expect(foreign.json().error.code).toBe(unknown.json().error.code);
    const signed = await post(`/v1/sandboxes/${id}/ports/80/url`, { signed: true, ttlMs: 60_000 });
    expect(signed.statusCode).toBe(200);
    expect(signed.json().url).toMatch(
      new RegExp(`^http://80-${id.replace('_', '-')}\\.localhost:${serverPort}/\\?burrow_signature=\\d+\\.`),
    );
    expect(Date.parse(signed.json().expiresAt) - Date.now()).toBeGreaterThan(50_000);
  });

  test('a private port answers 401 without the token, the proxied page with it, and anyone once public', async () => {
    const id = await create();
    expect(code(await preview(id, upstreamPort))).toBe('preview_access_denied');
    expect((await preview(id, upstreamPort, token(id))).body).toBe('upstream');
    // Another sandbox's token does not open this one.
    const otherId = await create();
    expect((await preview(id, upstreamPort, token(otherId))).status).toBe(401);
    await post(`/v1/sandboxes/${id}/ports/${upstreamPort}/url`, { public: true });
    expect((await preview(id, upstreamPort)).body).toBe('upstream');
  });

  test('stopped, deleted and paused-without-autoResume sandboxes answer at once with their codes', async () => {
    const stopped = await create();
    expect((await post(`/v1/sandboxes/${stopped}/stop`)).statusCode).toBeLessThan(300);
    const a = await preview(stopped, upstreamPort, token(stopped));
    expect([a.status, code(a)]).toEqual([409, 'sandbox_not_running']);
    const deleted = await create();
    await h.burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${deleted}`, headers: h.admin });
    const b = await preview(deleted, upstreamPort, token(deleted));
    expect([b.status, code(b)]).toEqual([404, 'sandbox_not_found']);
    const manual = await create({ autoResume: false });
    expect((await post(`/v1/sandboxes/${manual}/pause`)).statusCode).toBe(200);
    const c = await preview(manual, upstreamPort, token(manual));
    expect([c.status, code(c)]).toEqual([409, 'sandbox_paused']);
    const bad = await preview(manual, 0, token(manual));
    expect([bad.status, code(bad)]).toEqual([400, 'invalid_request']);
  });

  test('20 concurrent requests to a paused sandbox: one resume, every request served', async () => {
    const id = await create();
    expect((await post(`/v1/sandboxes/${id}/pause`)).statusCode).toBe(200);
    const ports = h.burrow.services.ports;
    const before = ports?.resumeCount ?? 0;
    const restoresBefore = h.driver.calls.filter((c) => c.verb === 'resume' && c.sandboxId === id).length;
    const hitsBefore = hits;
    const answers = await Promise.all(Array.from({ length: 20 }, () => preview(id, upstreamPort, token(id))));
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(200));
    expect((ports?.resumeCount ?? 0) - before).toBe(1);
    expect(h.driver.calls.filter((c) => c.verb === 'resume' && c.sandboxId === id).length - restoresBefore).toBe(1);
    expect(hits - hitsBefore).toBe(20);
  });
});
