import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { get, type IncomingMessage, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GvisorDriver } from '@burrow/runtime-gvisor';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { RunscCli } from '../../packages/runtime-gvisor/src/runsc-cli.js';
import { type Burrow, createBurrow, loadConfig } from '../../packages/server/src/main.js';
import { GvisorTemplateBuilder } from '../../packages/server/src/node/gvisor-template-builder.js';

const TEMPLATES_DIR = '/var/tmp/burrow-test-templates';

describe('persistence API over the real GvisorDriver', () => {
  let burrow: Burrow;
  let driver: GvisorDriver;
  let dataDir = '';
  let admin: Record<string, string> = {};

  const open = async () => {
    const logger = pino({ level: process.env.BURROW_TEST_LOG ?? 'silent' });
    driver = new GvisorDriver({ dataDir, logger });
    burrow = await createBurrow(loadConfig({}, { dataDir, templatesDir: TEMPLATES_DIR }), {
      driver,
      templateBuilder: new GvisorTemplateBuilder({ templatesDir: TEMPLATES_DIR }),
      logger,
    });
    await burrow.services.templates.ensureBase();
    const secret = await burrow.services.keys.ensureAdminKey();
    if (secret) admin = { authorization: `Bearer ${secret}` };
  };
  const call = async (method: 'GET' | 'POST' | 'DELETE', url: string, payload?: object) => {
    const res = await burrow.app.inject({ method, url: `/v1${url}`, headers: admin, ...(payload ? { payload } : {}) });
    return { status: res.statusCode, body: res.body ? (JSON.parse(res.body) as Record<string, unknown>) : {} };
  };
  const exec = async (id: string, cmd: string) => {
    const res = await call('POST', `/sandboxes/${id}/exec`, { cmd });
    return { ...res, stdout: res.status === 200 ? Buffer.from(String(res.body.stdout), 'base64').toString() : '' };
  };
  const create = async (extra: object = {}) => {
    const res = await call('POST', '/sandboxes', { memoryMiB: 256, diskMiB: 256, ...extra });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    return res.body.id as string;
  };

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'burrow-persist-'));
    await open();
  });
  afterAll(async () => {
    const rows = await burrow.store.sandboxes.listAcrossTenants();
    for (const row of rows) await driver.delete(row.id).catch((e: unknown) => console.error(e));
    await burrow?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  test('pause, auto-resume on exec, info says which layers it keeps', async () => {
    const id = await create();
    expect((await exec(id, 'echo kept > /root/a.txt')).status).toBe(200);
    const paused = await call('POST', `/sandboxes/${id}/pause`);
    expect(paused.status, JSON.stringify(paused.body)).toBe(200);
    expect(paused.body).toMatchObject({
      state: 'paused',
      desiredState: 'paused',
      keeps: { filesystem: true, memory: true },
    });
    const run = await exec(id, 'cat /root/a.txt');
    expect(run.status).toBe(200);
    expect(run.stdout).toBe('kept\n');
    expect((await call('GET', `/sandboxes/${id}`)).body.state).toBe('running');
    expect((await call('POST', `/sandboxes/${id}/stop`)).body).toMatchObject({
      state: 'stopped',
      keeps: { memory: false },
    });
    expect((await call('POST', `/sandboxes/${id}/start`)).body.state).toBe('running');
    expect((await exec(id, 'cat /root/a.txt')).stdout).toBe('kept\n');
    expect((await call('DELETE', `/sandboxes/${id}`)).status).toBe(204);
  });

  test('a pause with an upload and a download in flight ends both and pauses (the overlay is not kept busy)', async () => {
    const id = await create();
    expect((await exec(id, 'head -c 48M /dev/zero > /root/large.bin')).status).toBe(200);
    const origin = new URL(await burrow.app.listen({ host: '127.0.0.1', port: 0 })).origin;
    const staged = async () => (await exec(id, 'ls -A /.burrow-tmp 2>/dev/null | wc -l')).stdout.trim();
    // An upload that sent 1 MiB and waits for more, and a download whose client stopped reading.
    const upload = request(`${origin}/v1/sandboxes/${id}/files/content?path=/root/big.bin`, {
      method: 'PUT',
      headers: { ...admin, 'content-type': 'application/octet-stream' },
    });
    const uploaded = new Promise<{ status: number; body: string }>((resolve, reject) => {
      upload.on('response', (res) => {
        let body = '';
        res.on('data', (c: Buffer) => {
          body += c.toString();
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      upload.on('error', reject);
    });
    upload.write(Buffer.alloc(1024 * 1024, 1));
    const download = await new Promise<IncomingMessage>((resolve, reject) => {
      get(`${origin}/v1/sandboxes/${id}/files/content?path=/root/large.bin`, { headers: admin }, (res) => {
        res.once('data', () => res.pause());
        resolve(res);
      }).on('error', reject);
    });
    expect(download.statusCode).toBe(200);
    let receivedBytes = 0;
    const downloaded = new Promise<boolean>((resolve) => {
      download.on('close', () => resolve(download.complete));
    });
    for (let i = 0; i < 400 && (await staged()) === '0'; i++) await new Promise((r) => setTimeout(r, 25));
    expect(await staged()).toBe('1');
    const paused = await call('POST', `/sandboxes/${id}/pause`);
    expect(paused.status, JSON.stringify(paused.body)).toBe(200);
    expect(paused.body.state).toBe('paused');
    const refused = await uploaded;
    upload.destroy();
    expect(refused.status, refused.body).toBe(409);
    download.on('data', (c: Buffer) => {
      receivedBytes += c.length;
    });
    download.on('error', () => undefined);
    download.resume();
    expect(await downloaded).toBe(false);
    expect(receivedBytes).toBeLessThan(48 * 1024 * 1024);
    // Resumed by the exec: nothing was written, and no temporary file is left.
    expect(await staged()).toBe('0');
    expect((await exec(id, 'test -e /root/big.bin && echo there || echo absent')).stdout.trim()).toBe('absent');
    expect((await call('DELETE', `/sandboxes/${id}`)).status).toBe(204);
  });

  test('a background command (an HTTP server holding a counter in memory) survives pause and resume with its pid', async () => {
    const id = await create();
    const server =
      'python3 -c \'import http.server\nn=0\nclass H(http.server.BaseHTTPRequestHandler):\n  def do_GET(s):\n    global n\n    n+=1\n    b=str(n).encode()\n    s.send_response(200); s.send_header("Content-Length",str(len(b))); s.end_headers(); s.wfile.write(b)\n  def log_message(s,*a): pass\nhttp.server.HTTPServer(("127.0.0.1",8080),H).serve_forever()\'';
    const started = await call('POST', `/sandboxes/${id}/commands`, { cmd: server });
    expect(started.status, JSON.stringify(started.body)).toBe(201);
    const ask =
      'python3 -c \'import urllib.request;print(urllib.request.urlopen("http://127.0.0.1:8080", timeout=20).read().decode())\'';
    let first = '';
    for (let i = 0; i < 50 && first === ''; i++) {
      first = (await exec(id, `${ask} 2>/dev/null || true`)).stdout.trim();
      if (first === '') await new Promise((r) => setTimeout(r, 100));
    }
    expect(first).toBe('1');
    await call('POST', `/sandboxes/${id}/pause`);
    expect((await call('POST', `/sandboxes/${id}/resume`)).body.state).toBe('running');
    expect((await exec(id, ask)).stdout.trim()).toBe('2');
    const listed = await call('GET', `/sandboxes/${id}/commands/${started.body.commandId}`);
    expect(listed.body).toMatchObject({ status: 'running', pid: started.body.pid });
    expect((await exec(id, `kill -0 ${started.body.pid} && echo alive`)).stdout).toBe('alive\n');
    await call('DELETE', `/sandboxes/${id}`);
  });

  test('autoResume: false refuses exec and files on a paused sandbox with sandbox_paused', async () => {
    const id = await create({ autoResume: false });
    await call('POST', `/sandboxes/${id}/pause`);
    const refused = await exec(id, 'true');
    expect(refused.status).toBe(409);
    expect((refused.body.error as { code: string }).code).toBe('sandbox_paused');
    const file = await call('GET', `/sandboxes/${id}/files/stat?path=/root`);
    expect(file.status).toBe(409);
    expect((await call('POST', `/sandboxes/${id}/resume`)).body.state).toBe('running');
    expect((await exec(id, 'true')).status).toBe(200);
    await call('DELETE', `/sandboxes/${id}`);
  });

  test('fork records lineage; children are listable by parent and diverge', async () => {
    const parent = await create();
    await exec(parent, 'echo parent > /root/who');
    const forked = await call('POST', `/sandboxes/${parent}/fork`, { count: 2 });
    expect(forked.status, JSON.stringify(forked.body)).toBe(201);
    const items = forked.body.items as Array<{ id: string; lineage: { parentId: string }; hostname: string }>;
    expect(items).toHaveLength(2);
    for (const child of items) {
      expect(child.lineage.parentId).toBe(parent);
      expect((await exec(child.id, 'cat /root/who')).stdout).toBe('parent\n');
      expect((await exec(child.id, 'hostname')).stdout).toBe(`${child.hostname}\n`);
      await exec(child.id, `echo ${child.id} > /root/who`);
    }
    const listed = await call('GET', `/sandboxes?parentId=${parent}`);
    expect((listed.body.items as Array<{ id: string }>).map((s) => s.id).sort()).toEqual(items.map((c) => c.id).sort());
    expect((await exec(parent, 'cat /root/who')).stdout).toBe('parent\n');
    for (const child of items) expect((await exec(child.id, 'cat /root/who')).stdout).toBe(`${child.id}\n`);
    expect((await call('POST', `/sandboxes/${parent}/fork`, { count: 0 })).status).toBe(400);
  });

  test('a named snapshot outlives its sandbox; unnamed ones go with it', async () => {
    const source = await create();
    await exec(source, 'echo snap > /root/s.txt');
    const named = await call('POST', `/sandboxes/${source}/snapshots`, { name: 'persist-test' });
    expect(named.status, JSON.stringify(named.body)).toBe(201);
    const unnamed = await call('POST', `/sandboxes/${source}/snapshots`, { memory: false });
    expect(unnamed.status).toBe(201);
    expect((await call('POST', `/sandboxes/${source}/snapshots`, { name: 'persist-test' })).status).toBe(409);
    await call('DELETE', `/sandboxes/${source}`);
    expect((await call('GET', `/snapshots/${unnamed.body.id}`)).status).toBe(404);
    expect((await call('GET', '/snapshots/persist-test')).body.memory).toBe(true);
    const withMemory = await create({ fromSnapshot: 'persist-test' });
    expect((await exec(withMemory, 'cat /root/s.txt')).stdout).toBe('snap\n');
    expect((await call('GET', `/sandboxes/${withMemory}`)).body.lineage).toMatchObject({ snapshotId: named.body.id });
    const fsOnly = await create({ fromSnapshot: 'persist-test', restoreMemory: false });
    expect((await exec(fsOnly, 'cat /root/s.txt')).stdout).toBe('snap\n');
    // Its own name, in the kernel and in the files the source's disk brought along (written by Burrow for the source).
    const fsOnlyName = fsOnly.replace('_', '-');
    expect(
      (await exec(fsOnly, 'hostname; cat /etc/hostname; grep -c sbx- /etc/hosts; grep -c "$(hostname)" /etc/hosts'))
        .stdout,
    ).toBe(`${fsOnlyName}\n${fsOnlyName}\n1\n1\n`);
    expect((await call('DELETE', '/snapshots/persist-test')).status).toBe(204);
    expect(await readdir(join(dataDir, 'snapshots')).then((n) => n.filter((x) => !x.startsWith('.')))).toEqual([]);
    expect((await call('POST', '/sandboxes', { fromSnapshot: 'persist-test' })).status).toBe(404);
  });

  test('after a restart, interrupted pause and resume are finished and a held fork parent continues', async () => {
    const pausing = await create();
    const resuming = await create();
    const forkParent = await create();
    await exec(pausing, 'echo p > /root/p');
    await call('POST', `/sandboxes/${resuming}/pause`);
    // Crash points: the rows say a step is under way; the host is before (pausing), after (resuming: still
    // paused) or in the middle (a fork held its parent still).
    const rowOf = async (id: string) => {
      const row = await burrow.store.sandboxes.getAcrossTenants(id);
      if (!row) throw new Error(`no row ${id}`);
      return row;
    };
    for (const [id, state] of [
      [pausing, 'pausing'],
      [resuming, 'resuming'],
    ] as const) {
      const row = await rowOf(id);
      await burrow.store.sandboxes.update(row.tenantId, id, row.version, { state }, new Date().toISOString());
    }
    const runsc = new RunscCli('runsc', join(dataDir, 'runsc'), 'systrap');
    expect((await runsc.run(['pause', forkParent])).exitCode).toBe(0);
    await burrow.close();
    await open();
    const report = await burrow.reconciler.reconcileOnce();
    expect(report.finished).toEqual(expect.arrayContaining([pausing, resuming]));
    expect((await call('GET', `/sandboxes/${pausing}`)).body.state).toBe('paused');
    expect((await call('GET', `/sandboxes/${resuming}`)).body.state).toBe('running');
    expect((await runsc.state(forkParent))?.status).toBe('running');
    expect((await exec(pausing, 'cat /root/p')).stdout).toBe('p\n');
    expect((await exec(forkParent, 'true')).status).toBe(200);
  });
});
