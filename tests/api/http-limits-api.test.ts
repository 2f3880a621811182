/**
 * HTTP limits over a real port on 127.0.0.1 (FAKE driver: the behaviour under test is the server's HTTP layer):
 * early answers to uploads, the minimum body rate, header / request / idle timeouts, per-address and per-key caps.
 * Limits are configured small so each check takes a second or two.
 */
import { connect, type Socket } from 'node:net';
import { Readable } from 'node:stream';
import { ErrorEnvelopeSchema } from '@burrow/contract';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { WebSocket } from 'ws';
import { RateLimitedError, Sandbox } from '../../packages/sdk/src/index.js';
import { DEFAULT_HTTP_LIMITS } from '../../packages/server/src/http/http-limits.js';
import { loadConfig } from '../../packages/server/src/main.js';
import { type Harness, startHarness } from './api-harness.js';

/** Log lines of the server (level, msg, code), kept to check how rejections are logged. */
const logLines: Array<{ level: number; msg: string; code?: string }> = [];
let h: Harness;
let url = '';
let port = 0;
let sandboxId = '';
const LIMITS = {
  headersTimeoutMs: 600,
  idleTimeoutMs: 400,
  requestTimeoutMs: 800,
  minBodyBytesPerSec: 2000,
  bodyRateWindowMs: 400,
  maxConnectionsPerAddress: 40,
  maxRequestsPerKey: 3,
};

beforeAll(async () => {
  const logger = pino(
    { level: 'info' },
    { write: (line: string) => logLines.push(JSON.parse(line) as (typeof logLines)[number]) },
  );
  h = await startHarness({ httpLimits: LIMITS, logger });
  url = await h.burrow.app.listen({ host: '127.0.0.1', port: 0 });
  port = Number(new URL(url).port);
  const sandbox = await Sandbox.create({ apiUrl: url, apiKey: h.adminSecret });
  sandboxId = sandbox.id;
  await sandbox.files.write('/root/f', 'a file, not a directory');
});
afterAll(async () => {
  await h?.close();
});

/** A raw connection to the server, its received bytes collected, `closed` resolved when the server ends it. */
async function rawConnection(): Promise<{ socket: Socket; received: () => string; closed: Promise<number> }> {
  const socket = connect(port, '127.0.0.1');
  await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  let text = '';
  socket.on('data', (chunk: Buffer) => {
    text += chunk.toString('latin1');
  });
  socket.on('error', () => undefined);
  const opened = performance.now();
  const closed = new Promise<number>((resolve) => socket.once('close', () => resolve(performance.now() - opened)));
  return { socket, received: () => text, closed };
}

function head(method: string, path: string, headers: Record<string, string>): string {
  const lines = [`${method} ${path} HTTP/1.1`, 'host: 127.0.0.1'];
  for (const [key, value] of Object.entries(headers)) lines.push(`${key}: ${value}`);
  return `${lines.join('\r\n')}\r\n\r\n`;
}

const uploadPath = (path: string) => `/v1/sandboxes/${sandboxId}/files/content?path=${encodeURIComponent(path)}`;

/** Rejects when `promise` takes longer than `ms` (a hang would take the server's idle timeout or forever). */
function within<T>(ms: number, promise: Promise<T>, what: string): Promise<T> {
  return Promise.race([
    promise,
    new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`${what} took over ${ms} ms`)), ms).unref()),
  ]);
}

describe('an answer before the request body is read', () => {
  test('closes the connection (Connection: close), after the client has the answer', async () => {
    const conn = await rawConnection();
    conn.socket.write(
      head('PUT', uploadPath('/root/f/x'), {
        authorization: `Bearer ${h.adminSecret}`,
        'content-type': 'application/octet-stream',
        'content-length': String(64 * 1024 * 1024),
      }),
    );
    conn.socket.write(Buffer.alloc(4 * 1024 * 1024, 1));
    await within(5000, conn.closed, 'the close of a refused upload');
    const answer = conn.received();
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    expect(answer.toLowerCase()).toContain('connection: close');
    expect(answer).toContain('"code":"not_a_directory"');
  });

  test('a failed upload followed at once by 20 SDK calls: every call answers at once', async () => {
    const sandbox = await Sandbox.get(sandboxId, { apiUrl: url, apiKey: h.adminSecret });
    const chunk = Buffer.alloc(4 * 1024 * 1024, 7);
    for (const data of [
      Readable.from(
        (function* () {
          for (let i = 0; i < 8; i++) yield chunk;
        })(),
      ),
      Buffer.alloc(32 * 1024 * 1024, 7),
    ]) {
      await expect(sandbox.files.write('/root/f/inside', data)).rejects.toMatchObject({ code: 'not_a_directory' });
      for (let i = 0; i < 20; i++) {
        const call =
          i % 3 === 0
            ? sandbox.files.exists('/root/f')
            : i % 3 === 1
              ? sandbox.files.write('/root/g', `call ${i}`)
              : sandbox.files.read('/root/f');
        await within(5000, call, `SDK call ${i} after a refused upload`);
      }
    }
  });

  test('an upload the client aborts is logged as a rejection, not as a server failure', async () => {
    const conn = await rawConnection();
    conn.socket.write(
      head('PUT', uploadPath('/root/aborted'), {
        authorization: `Bearer ${h.adminSecret}`,
        'content-type': 'application/octet-stream',
        'content-length': String(1024 * 1024),
      }),
    );
    conn.socket.write(Buffer.alloc(100_000, 1));
    await new Promise((resolve) => setTimeout(resolve, 100));
    const before = logLines.length;
    conn.socket.destroy();
    await expect.poll(() => logLines.slice(before).some((l) => l.msg === 'request rejected')).toBe(true);
    expect(logLines.slice(before).filter((l) => l.level >= 50)).toEqual([]);
    expect(
      await Sandbox.get(sandboxId, { apiUrl: url, apiKey: h.adminSecret }).then((s) => s.files.exists('/root/aborted')),
    ).toBe(false);
  });
});

describe('slow clients', () => {
  test('an upload below the minimum rate gets 408 request_timeout and its connection closes', async () => {
    const conn = await rawConnection();
    conn.socket.write(
      head('PUT', uploadPath('/root/slow'), {
        authorization: `Bearer ${h.adminSecret}`,
        'content-type': 'application/octet-stream',
        'content-length': '100000',
      }),
    );
    const drip = setInterval(() => conn.socket.write('x'), 100);
    try {
      await within(5000, conn.closed, 'the close of a 10 bytes/s upload');
    } finally {
      clearInterval(drip);
    }
    expect(conn.received()).toMatch(/^HTTP\/1\.1 408 /);
    expect(conn.received()).toContain('"code":"request_timeout"');
  });

  test('an upload above the minimum rate passes however long it takes (no request deadline on uploads)', async () => {
    const sandbox = await Sandbox.get(sandboxId, { apiUrl: url, apiKey: h.adminSecret });
    // 8 KiB every 100 ms (80 KiB/s, above 2000 B/s) for 2 s: longer than the 800 ms request timeout.
    const piece = Buffer.alloc(8 * 1024, 3);
    const slow = Readable.from(
      (async function* () {
        for (let i = 0; i < 20; i++) {
          await new Promise((resolve) => setTimeout(resolve, 100));
          yield piece;
        }
      })(),
    );
    const info = await sandbox.files.write('/root/slow-but-fine', slow);
    expect(info.sizeBytes).toBe(20 * piece.length);
  });

  test('a JSON body that does not arrive within the request timeout gets 408', async () => {
    const conn = await rawConnection();
    conn.socket.write(
      head('POST', `/v1/sandboxes/${sandboxId}/files/mkdir`, {
        authorization: `Bearer ${h.adminSecret}`,
        'content-type': 'application/json',
        'content-length': '100000',
      }),
    );
    // 100 bytes every 40 ms (2500 B/s) is above the minimum rate: only the deadline ends it.
    conn.socket.write('{"path":"');
    const drip = setInterval(() => conn.socket.write('a'.repeat(100)), 40);
    try {
      await within(5000, conn.closed, 'the close of a JSON body past its deadline');
    } finally {
      clearInterval(drip);
    }
    expect(conn.received()).toMatch(/^HTTP\/1\.1 408 /);
    expect(conn.received()).toContain('did not arrive within 800 ms');
  });

  test('headers that do not arrive within the headers timeout: the connection is closed', async () => {
    const conn = await rawConnection();
    conn.socket.write('GET /v1/health HTTP/1.1\r\nhost: 127.0.0.1\r\n');
    const drip = setInterval(() => conn.socket.write('x-slow: 1\r\n'), 100);
    try {
      await within(5000, conn.closed, 'the close of a connection whose headers never end');
    } finally {
      clearInterval(drip);
    }
  });

  test('an idle kept-alive connection is closed after the idle timeout', async () => {
    const conn = await rawConnection();
    conn.socket.write(head('GET', '/v1/health', {}));
    const closedAfterMs = await within(5000, conn.closed, 'the close of an idle connection');
    expect(conn.received()).toMatch(/^HTTP\/1\.1 200 /);
    expect(closedAfterMs).toBeGreaterThanOrEqual(LIMITS.idleTimeoutMs - 50);
  });
});

describe('caps', () => {
  test('connections over the per-address cap get 429 with Retry-After and are closed', async () => {
    const conns = await Promise.all(Array.from({ length: LIMITS.maxConnectionsPerAddress + 5 }, () => rawConnection()));
    try {
      for (const conn of conns) conn.socket.write(head('GET', '/v1/health', {}));
      await expect.poll(() => conns.filter((c) => /^HTTP\/1\.1 \d{3} /.test(c.received())).length).toBe(conns.length);
      const refused = conns.filter((c) => c.received().startsWith('HTTP/1.1 429 '));
      expect(refused.length).toBeGreaterThanOrEqual(5);
      for (const conn of refused) {
        expect(conn.received().toLowerCase()).toContain('retry-after: 1');
        expect(conn.received()).toContain('"code":"rate_limited"');
        await within(2000, conn.closed, 'the close of a refused connection');
      }
    } finally {
      for (const conn of conns) conn.socket.destroy();
    }
    // Once they are gone, the address gets its connections again.
    await new Promise((resolve) => setTimeout(resolve, 50));
    const again = await rawConnection();
    again.socket.write(head('GET', '/v1/health', {}));
    await expect.poll(() => again.received()).toMatch(/^HTTP\/1\.1 200 /);
    again.socket.destroy();
  });

  test('requests in flight over the per-key cap get 429; other keys are not affected', async () => {
    const held = await Promise.all(Array.from({ length: LIMITS.maxRequestsPerKey }, () => rawConnection()));
    try {
      // Uploads kept open (above the minimum rate) hold their key's slots.
      for (const conn of held) {
        conn.socket.write(
          head('PUT', uploadPath('/root/held'), {
            authorization: `Bearer ${h.adminSecret}`,
            'content-type': 'application/octet-stream',
            'content-length': String(10 * 1024 * 1024),
          }),
        );
      }
      const feed = setInterval(() => {
        for (const conn of held) conn.socket.write(Buffer.alloc(4096));
      }, 50);
      try {
        await new Promise((resolve) => setTimeout(resolve, 200));
        const admin = await Sandbox.get(sandboxId, { apiUrl: url, apiKey: h.adminSecret }).catch((e) => e);
        expect(admin).toBeInstanceOf(RateLimitedError);
        const res = await fetch(`${url}/v1/sandboxes`, { headers: { authorization: `Bearer ${h.adminSecret}` } });
        expect(res.status).toBe(429);
        expect(res.headers.get('retry-after')).toBe('1');
        expect(ErrorEnvelopeSchema.parse(await res.json()).error.code).toBe('rate_limited');
        const other = await h.burrow.services.keys.create(await h.burrow.services.keys.authenticate(h.adminSecret), {
          name: 'other',
          role: 'member',
        });
        const otherRes = await fetch(`${url}/v1/sandboxes`, { headers: { authorization: `Bearer ${other.secret}` } });
        expect(otherRes.status).toBe(200);
      } finally {
        clearInterval(feed);
      }
    } finally {
      for (const conn of held) conn.socket.destroy();
    }
    await expect
      .poll(
        async () =>
          (await fetch(`${url}/v1/sandboxes`, { headers: { authorization: `Bearer ${h.adminSecret}` } })).status,
      )
      .toBe(200);
  });
  test('a closed WebSocket frees its slot of the per-key cap', async () => {
    const wsUrl = `${url.replace('http', 'ws')}/v1/sandboxes/${sandboxId}/exec/stream`;
    for (let i = 0; i < LIMITS.maxRequestsPerKey + 3; i++) {
      const ws = new WebSocket(wsUrl, { headers: { authorization: `Bearer ${h.adminSecret}` } });
      await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
      const closed = new Promise((resolve) => ws.once('close', resolve));
      ws.close();
      await closed;
    }
    await expect
      .poll(
        async () =>
          (await fetch(`${url}/v1/sandboxes`, { headers: { authorization: `Bearer ${h.adminSecret}` } })).status,
      )
      .toBe(200);
  });
});

test('a DELETE with content-type application/json and no body is a DELETE', async () => {
  const sandbox = await Sandbox.get(sandboxId, { apiUrl: url, apiKey: h.adminSecret });
  await sandbox.files.write('/root/to-remove', 'x');
  const res = await fetch(`${url}/v1/sandboxes/${sandboxId}/files?path=${encodeURIComponent('/root/to-remove')}`, {
    method: 'DELETE',
    headers: { authorization: `Bearer ${h.adminSecret}`, 'content-type': 'application/json', 'content-length': '0' },
  });
  expect(res.status, await res.clone().text()).toBe(204);
  expect(await sandbox.files.exists('/root/to-remove')).toBe(false);
});

test('loadConfig reads the limits from BURROW_HTTP_* and refuses a zero headers or idle timeout', () => {
  const config = loadConfig({
    BURROW_HTTP_HEADERS_TIMEOUT_MS: '1000',
    BURROW_HTTP_IDLE_TIMEOUT_MS: '2000',
    BURROW_HTTP_REQUEST_TIMEOUT_MS: '0',
    BURROW_HTTP_MIN_BODY_BYTES_PER_SEC: '10',
    BURROW_HTTP_BODY_RATE_WINDOW_MS: '3000',
    BURROW_HTTP_MAX_CONNECTIONS_PER_ADDRESS: '4',
    BURROW_HTTP_MAX_REQUESTS_PER_KEY: '5',
  });
  expect(config.httpLimits).toEqual({
    headersTimeoutMs: 1000,
    idleTimeoutMs: 2000,
    requestTimeoutMs: 0,
    minBodyBytesPerSec: 10,
    bodyRateWindowMs: 3000,
    maxConnectionsPerAddress: 4,
    maxRequestsPerKey: 5,
  });
  expect(loadConfig({}).httpLimits).toEqual(DEFAULT_HTTP_LIMITS);
  expect(() => loadConfig({ BURROW_HTTP_IDLE_TIMEOUT_MS: '0' })).toThrow(
    'BURROW_HTTP_IDLE_TIMEOUT_MS must be positive',
  );
});
