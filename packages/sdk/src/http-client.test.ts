/**
 * The Node.js request path of HttpClient (node:http for JSON and bodiless calls) against a FAKE node:http server:
 * error envelopes, a stale kept-alive socket, refused connections. The real server is exercised by tests/e2e.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { AuthenticationError, ConnectionError } from './errors.js';
import { HttpClient } from './http-client.js';

describe('HttpClient on Node (node:http path)', () => {
  let server: Server;
  let apiUrl = '';
  /** Sockets that already carried one answered request. */
  const used = new WeakSet<Socket>();
  let resetsLeft = 0;
  let requests = 0;
  beforeAll(async () => {
    server = createServer((req, res) => {
      requests++;
      if (req.url?.startsWith('/v1/stale') && resetsLeft > 0 && used.has(req.socket)) {
        // As if the server had closed the idle socket just as the client reused it: nothing was answered.
        resetsLeft--;
        req.socket.resetAndDestroy();
        return;
      }
      used.add(req.socket);
      if (req.url?.startsWith('/v1/die')) {
        // As if the server process died while it worked on the request.
        req.socket.destroy();
        return;
      }
      if (req.url?.startsWith('/v1/refuse')) {
        // An early refusal that leaves the rest of the body unread on a kept-alive connection (as any server may).
        req.once('data', () => req.pause());
        res.writeHead(507, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { code: 'no_space', message: 'disk full', requestId: 'req_2' } }));
        return;
      }
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        if (req.url === '/v1/denied') {
          res.writeHead(401, { 'content-type': 'application/json', 'x-request-id': 'req_1' });
          res.end(JSON.stringify({ error: { code: 'unauthorized', message: 'unknown API key', requestId: 'req_1' } }));
          return;
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        const tenant = req.headers['x-burrow-tenant'] ?? null;
        res.end(JSON.stringify({ method: req.method, body: Buffer.concat(chunks).toString('utf8'), tenant }));
      });
    });
    // Kept-alive sockets stay open long enough for a call stuck behind an unread body to show.
    server.keepAliveTimeout = 60_000;
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    apiUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  const Echo = z.object({ method: z.string(), body: z.string() });

  it('sends JSON, maps error envelopes, and resends once on a kept-alive socket reset before any answer', async () => {
    const http = new HttpClient({ apiUrl, apiKey: 'bk_test' });
    expect(await http.json(Echo, 'POST', '/echo', { json: { a: 1 } })).toEqual({ method: 'POST', body: '{"a":1}' });
    await expect(http.json(Echo, 'GET', '/denied')).rejects.toBeInstanceOf(AuthenticationError);
    // The next call reuses the kept-alive socket (once the agent took it back); the server resets it unanswered.
    await new Promise((resolve) => setImmediate(resolve));
    resetsLeft = 1;
    const before = requests;
    expect(await http.json(Echo, 'POST', '/stale', { json: { b: 2 } })).toEqual({ method: 'POST', body: '{"b":2}' });
    expect(resetsLeft).toBe(0);
    expect(requests - before).toBe(2);
  });

  it('never reuses the connection of an upload the server refused before reading it all', async () => {
    const http = new HttpClient({ apiUrl, apiKey: 'bk_test' });
    // Small enough to be all sent (into socket buffers) before the answer: the connection looks reusable.
    const chunk = Buffer.alloc(64 * 1024, 1);
    const bodies = [
      Buffer.alloc(256 * 1024, 1),
      (async function* () {
        for (let i = 0; i < 4; i++) yield chunk;
      })(),
    ];
    for (const body of bodies) {
      await expect(http.json(Echo, 'PUT', '/refuse', { body })).rejects.toMatchObject({ code: 'no_space' });
      for (let i = 0; i < 20; i++) {
        const call =
          i % 2 === 0
            ? http.json(Echo, 'GET', '/echo')
            : http.json(Echo, 'PUT', '/echo', { body: new TextEncoder().encode(`call ${i}`) });
        const late = new Promise((_, reject) => setTimeout(() => reject(new Error(`call ${i} hung`)), 3000).unref());
        await Promise.race([call, late]);
      }
    }
  });

  it('sends X-Burrow-Tenant when a tenant is set, and none otherwise', async () => {
    const Tenant = z.object({ tenant: z.string().nullable() });
    expect(await new HttpClient({ apiUrl, apiKey: 'bk_test' }).json(Tenant, 'GET', '/echo')).toEqual({ tenant: null });
    const http = new HttpClient({ apiUrl, apiKey: 'bk_test', tenantId: 'tenant-b' });
    expect(await http.json(Tenant, 'GET', '/echo')).toEqual({ tenant: 'tenant-b' });
    expect(http.authHeaders()).toEqual({ authorization: 'Bearer bk_test', 'x-burrow-tenant': 'tenant-b' });
  });

  it('a server that closes the connection mid-request is a ConnectionError that says so', async () => {
    const http = new HttpClient({ apiUrl, apiKey: 'bk_test' });
    for (const call of [
      () => http.json(Echo, 'POST', '/die', { json: { a: 1 } }),
      () => http.json(Echo, 'PUT', '/die', { body: new Uint8Array(10) }),
    ]) {
      const error = await call().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ConnectionError);
      expect((error as Error).message).toMatch(/closed the connection mid-request/);
      expect((error as Error).message).not.toMatch(/could not reach/);
      expect((error as ConnectionError).hint).toMatch(/stopped or restarted/);
    }
  });

  it('a server that cannot be reached is a ConnectionError naming the URL', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(closed.address() as AddressInfo).port}`;
    await new Promise((resolve) => closed.close(resolve));
    const http = new HttpClient({ apiUrl: url, apiKey: 'bk_test' });
    const error = await http.json(Echo, 'GET', '/echo').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectionError);
    expect((error as Error).message).toContain(url);
    expect((error as Error).message).toMatch(/could not reach/);
  });
});
