import { execFile, execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { Agent, request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { GvisorDriver } from '@burrow/runtime-gvisor';
import { pino } from 'pino';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import WebSocket from 'ws';
import { type Burrow, createBurrow, loadConfig } from '../../packages/server/src/main.js';
import { GvisorTemplateBuilder } from '../../packages/server/src/node/gvisor-template-builder.js';

const TEMPLATES_DIR = '/var/tmp/burrow-test-templates';
const APP = await readFile(new URL('./fixtures/preview-app.py', import.meta.url));
const INDEX = '<!doctype html><title>preview</title><p>served by http.server</p>';

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

describe('preview URLs (real runsc, real network namespaces)', { timeout: 300_000 }, () => {
  let burrow: Burrow;
  let dataDir = '';
  let admin: Record<string, string> = {};
  let serverPort = 0;
  let id = '';
  let token = '';
  const logger = pino({ level: process.env.BURROW_TEST_LOG ?? 'silent' });

  const api = async (method: 'GET' | 'POST' | 'PUT', url: string, payload?: unknown) => {
    const res = await burrow.app.inject({
      method,
      url,
      headers: admin,
      ...(payload === undefined ? {} : { payload: payload as object }),
    });
    return { status: res.statusCode, json: res.body === '' ? undefined : res.json(), body: res.body };
  };
  const host = (port: number, sandboxId = id) => `${port}-${sandboxId.replace('_', '-')}.localhost:${serverPort}`;
  /** One request to the server with the preview `Host`, through 127.0.0.1 (Node does not resolve *.localhost). */
  const preview = (
    port: number,
    options: { path?: string; method?: string; headers?: Record<string, string>; body?: Buffer; agent?: Agent } = {},
  ): Promise<Answer> =>
    new Promise((resolve, reject) => {
      const req = httpRequest(
        {
          host: '127.0.0.1',
          port: serverPort,
          path: options.path ?? '/',
          method: options.method ?? 'GET',
          headers: { host: host(port), ...options.headers },
          ...(options.agent === undefined ? {} : { agent: options.agent }),
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () =>
            resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
          );
        },
      );
      req.on('error', reject);
      req.end(options.body);
    });
  const withToken = () => ({ 'x-burrow-access-token': token });
  const state = async () => (await api('GET', `/v1/sandboxes/${id}`)).json.state as string;

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'burrow-preview-'));
    const config = loadConfig({}, { dataDir, templatesDir: TEMPLATES_DIR, warmPool: [] });
    burrow = await createBurrow(config, {
      driver: new GvisorDriver({ dataDir, logger, network: {} }),
      templateBuilder: new GvisorTemplateBuilder({ templatesDir: TEMPLATES_DIR }),
      logger,
    });
    await burrow.services.templates.ensureBase();
    admin = { authorization: `Bearer ${await burrow.services.keys.ensureAdminKey()}` };
    await burrow.app.listen({ host: '127.0.0.1', port: 0 });
    serverPort = (burrow.app.server.address() as AddressInfo).port;
    const made = await api('POST', '/v1/sandboxes', { memoryMiB: 256, diskMiB: 512 });
    expect(made.status, made.body).toBe(201);
    id = made.json.id;
    for (const [path, content] of [
      ['/srv/app.py', APP],
      ['/srv/www/index.html', Buffer.from(INDEX)],
    ] as const) {
      const put = await burrow.app.inject({
        method: 'PUT',
        url: `/v1/sandboxes/${id}/files/content?path=${path}`,
        headers: { ...admin, 'content-type': 'application/octet-stream' },
        payload: content,
      });
      expect(put.statusCode, put.body).toBe(200);
    }
    for (const cmd of ['python3 -m http.server 8000 --directory /srv/www', 'python3 /srv/app.py 8001']) {
      const started = await api('POST', `/v1/sandboxes/${id}/commands`, { cmd });
      expect(started.status, started.body).toBe(201);
    }
    const url = await api('POST', `/v1/sandboxes/${id}/ports/8000/url`, {});
    expect(url.status, url.body).toBe(200);
    token = url.json.accessToken;
    for (let i = 0; i < 100; i += 1) {
      const listed = await api('GET', `/v1/sandboxes/${id}/ports`);
      const ports = (listed.json?.ports ?? []).map((p: { port: number }) => p.port);
      if (ports.includes(8000) && ports.includes(8001)) break;
      await new Promise((r) => setTimeout(r, 200));
    }
  });
  afterAll(async () => {
    if (id !== '') await burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${id}`, headers: admin });
    await burrow?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  test('ports ls lists the listening ports; the API mints private URLs with the access token', async () => {
    const listed = await api('GET', `/v1/sandboxes/${id}/ports`);
    expect(listed.status, listed.body).toBe(200);
    const ports = listed.json.ports as Array<{ port: number; address: string; public: boolean; url: string }>;
    expect(ports.find((p) => p.port === 8000)).toMatchObject({ public: false, url: `http://${host(8000)}/` });
    expect(ports.find((p) => p.port === 8001)?.address).toBe('0.0.0.0');
    const url = await api('POST', `/v1/sandboxes/${id}/ports/8000/url`, {});
    expect(url.json).toMatchObject({ port: 8000, url: `http://${host(8000)}/`, public: false, expiresAt: null });
    expect(url.json.accessToken).toMatch(/^bpt_[A-Za-z0-9_-]{43}$/);
    for (const bad of ['0', '65536', '80a']) {
      const res = await api('POST', `/v1/sandboxes/${id}/ports/${bad}/url`, {});
      expect(res.status, res.body).toBe(400);
      expect(res.json.error.code).toBe('invalid_request');
    }
  });

  test('curl: 401 without the token, 200 with it, public after --public, private again', async () => {
    // curl runs beside the server in this process: never synchronously.
    const run = promisify(execFile);
    const curl = async (...args: string[]) =>
      (await run('curl', ['-s', '-m', '20', '-o', '/dev/null', '-w', '%{http_code}', ...args])).stdout;
    const url = `http://${host(8000)}/`;
    expect(await curl(url)).toBe('401');
    const denied = await preview(8000);
    expect(denied.status).toBe(401);
    expect(JSON.parse(denied.body.toString()).error).toMatchObject({ code: 'preview_access_denied' });
    expect(await curl('-H', 'X-Burrow-Access-Token: bpt_wrong', url)).toBe('401');
    expect(await curl('-H', `X-Burrow-Access-Token: ${token}`, url)).toBe('200');
    const page = (await run('curl', ['-s', '-m', '20', '-H', `X-Burrow-Access-Token: ${token}`, url])).stdout;
    expect(page).toContain('served by http.server');
    const made = await api('POST', `/v1/sandboxes/${id}/ports/8000/url`, { public: true });
    expect(made.json).toMatchObject({ public: true, accessToken: null });
    expect(await curl(url)).toBe('200');
    await api('POST', `/v1/sandboxes/${id}/ports/8000/url`, { public: false });
    expect(await curl(url)).toBe('401');
  });

  test('signed URL: sets a host cookie, works until it expires, a tampered one is refused', async () => {
    const signed = await api('POST', `/v1/sandboxes/${id}/ports/8001/url`, { signed: true, ttlMs: 3000 });
    expect(signed.status, signed.body).toBe(200);
    expect(signed.json.accessToken).toBeNull();
    const path = new URL(signed.json.url).pathname + new URL(signed.json.url).search;
    const first = await preview(8001, { path });
    expect(first.status).toBe(302);
    expect(first.headers.location).toBe('/');
    const cookie = String(first.headers['set-cookie']?.[0]).split(';')[0] ?? '';
    expect(cookie).toMatch(/^burrow_preview=/);
    expect(first.headers['set-cookie']?.[0]).not.toMatch(/Domain=/i);
    const ok = await preview(8001, { headers: { cookie } });
    expect(ok.status).toBe(200);
    expect(ok.body.toString()).toBe('hello from the sandbox\n');
    // The cookie is bound to its port.
    expect((await preview(8000, { headers: { cookie } })).status).toBe(401);
    const tampered = path.replace(/.$/, (c) => (c === 'A' ? 'B' : 'A'));
    const bad = await preview(8001, { path: tampered });
    expect(bad.status).toBe(401);
    expect(JSON.parse(bad.body.toString()).error.code).toBe('preview_link_invalid');
    await new Promise((r) => setTimeout(r, 3100));
    const expired = await preview(8001, { headers: { cookie } });
    expect(expired.status).toBe(401);
    expect(JSON.parse(expired.body.toString()).error.code).toBe('preview_link_expired');
    expect((await preview(8001, { path })).status).toBe(401);
  });

  test('headers: the sandbox never sees the token or the cookie and cannot speak for Burrow', async () => {
    const res = await preview(8001, {
      path: '/headers',
      headers: { ...withToken(), 'x-burrow-tenant': 'other', cookie: 'burrow_preview=1.x; app=kept' },
    });
    expect(res.status).toBe(200);
    const seen = JSON.parse(res.body.toString());
    expect(Object.keys(seen).filter((k) => k.startsWith('x-burrow-'))).toEqual([]);
    expect(seen.cookie).toBe('app=kept');
    expect(seen['x-forwarded-for']).toBeDefined();
    expect(res.headers['x-burrow-sandbox']).toBeUndefined();
    expect(res.headers['x-request-id']).toMatch(/^req_/);
    expect(res.headers['set-cookie']).toEqual(['app=1; Path=/']);
  });

  test('large bodies both ways, streaming, keep-alive', async () => {
    const body = randomBytes(24 * 1024 * 1024);
    const posted = await preview(8001, { method: 'POST', path: '/upload', headers: withToken(), body });
    expect(posted.status).toBe(200);
    expect(JSON.parse(posted.body.toString())).toEqual({
      bytes: body.length,
      sha256: createHash('sha256').update(body).digest('hex'),
    });
    // Streaming: the first part arrives before the stream ends (0.4 s between parts).
    const times: number[] = [];
    const started = Date.now();
    await new Promise<void>((resolve, reject) => {
      const req = httpRequest(
        { host: '127.0.0.1', port: serverPort, path: '/stream', headers: { host: host(8001), ...withToken() } },
        (res) => {
          res.on('data', () => times.push(Date.now() - started));
          res.on('end', resolve);
        },
      );
      req.on('error', reject);
      req.end();
    });
    expect(times.length).toBeGreaterThanOrEqual(2);
    expect((times.at(-1) ?? 0) - (times[0] ?? 0)).toBeGreaterThan(500);
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const sockets = new Set<unknown>();
    for (let i = 0; i < 3; i += 1) {
      await new Promise<void>((resolve, reject) => {
        const req = httpRequest(
          { host: '127.0.0.1', port: serverPort, path: '/', agent, headers: { host: host(8001), ...withToken() } },
          (res) => {
            res.resume();
            res.on('end', resolve);
          },
        );
        req.on('socket', (socket) => sockets.add(socket));
        req.on('error', reject);
        req.end();
      });
    }
    agent.destroy();
    expect(sockets.size).toBe(1);
  });

  test('WebSocket echo through the preview URL; 401 for an upgrade without the token', async () => {
    const echo = await new Promise<string>((resolve, reject) => {
      const ws = new WebSocket(`ws://127.0.0.1:${serverPort}/ws`, { headers: { host: host(8001), ...withToken() } });
      ws.on('open', () => ws.send('ping'));
      ws.on('message', (data) => {
        resolve(data.toString());
        ws.close();
      });
      ws.on('error', reject);
    });
    expect(echo).toBe('echo: ping');
    const refused = await new Promise<number>((resolve) => {
      const ws = new WebSocket(`ws://127.0.0.1:${serverPort}/ws`, { headers: { host: host(8001) } });
      ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
      ws.on('error', () => resolve(-1));
    });
    expect(refused).toBe(401);
  });

  test('headless Chromium loads a signed URL and talks WebSocket to the sandbox', async () => {
    const signed = await api('POST', `/v1/sandboxes/${id}/ports/8000/url`, { signed: true });
    const wsSigned = await api('POST', `/v1/sandboxes/${id}/ports/8001/url`, { signed: true });
    const browser = await chromium.launch({
      executablePath: execFileSync('which', ['chromium']).toString().trim(),
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
      ],
    });
    try {
      const page = await browser.newPage();
      // http.server's page through a signed URL: redirected to the bare URL, with the cookie set for its host.
      const response = await page.goto(signed.json.url);
      expect(response?.status()).toBe(200);
      expect(page.url()).toBe(`http://${host(8000)}/`);
      expect(await page.textContent('p')).toBe('served by http.server');
      // The WebSocket app's page, then a WebSocket from it to its own host (its cookie goes along).
      await page.goto(wsSigned.json.url);
      expect(page.url()).toBe(`http://${host(8001)}/`);
      expect(await page.textContent('body')).toContain('hello from the sandbox');
      // A string, not a function: the test's own transform would rename `WebSocket` inside a function.
      const title = await page.evaluate(`new Promise((resolve) => {
        const ws = new WebSocket('ws://' + location.host + '/ws');
        ws.onopen = () => ws.send('from the browser');
        ws.onmessage = (event) => resolve(String(event.data));
        ws.onerror = () => resolve('error');
      })`);
      expect(title).toBe('echo: from the browser');
    } finally {
      await browser.close();
    }
  });

  test('502 when nothing listens; bad ports and unknown sandboxes get their codes', async () => {
    const none = await preview(8009, { headers: withToken() });
    expect(none.status).toBe(502);
    expect(JSON.parse(none.body.toString()).error).toMatchObject({ code: 'port_not_listening' });
    expect(JSON.parse(none.body.toString()).error.message).toContain('8009');
    for (const port of [0, 70000]) {
      const res = await preview(port, { headers: withToken() });
      expect(res.status).toBe(400);
      expect(JSON.parse(res.body.toString()).error.code).toBe('invalid_request');
    }
    const unknown = 'sbx_00000000000000000000';
    const answer = await new Promise<Answer>((resolve, reject) => {
      const req = httpRequest(
        {
          host: '127.0.0.1',
          port: serverPort,
          headers: {
            host: host(8000, unknown),
            'x-burrow-access-token': burrow.services.ports?.access.accessToken(unknown) ?? '',
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () =>
            resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
          );
        },
      );
      req.on('error', reject);
      req.end();
    });
    expect(answer.status).toBe(404);
    expect(JSON.parse(answer.body.toString()).error.code).toBe('sandbox_not_found');
    // The API on the same listener is untouched by the proxy.
    const health = await fetch(`http://127.0.0.1:${serverPort}/v1/health`);
    expect(health.status).toBe(200);
  });

  test('a paused sandbox wakes on request: 20 concurrent requests, one resume, all served', async () => {
    const paused = await api('POST', `/v1/sandboxes/${id}/pause`);
    expect(paused.status, paused.body).toBe(200);
    expect(await state()).toBe('paused');
    const ports = burrow.services.ports;
    const before = ports?.resumeCount ?? 0;
    const answers = await Promise.all(Array.from({ length: 20 }, () => preview(8001, { headers: withToken() })));
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(200));
    expect(answers.every((a) => a.body.toString() === 'hello from the sandbox\n')).toBe(true);
    expect((ports?.resumeCount ?? 0) - before).toBe(1);
    expect(await state()).toBe('running');
  });
});
