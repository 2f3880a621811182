/**
 * Snapshots in the real S3 server (Swift s3api, BURROW_TEST_S3_STORE) with the real GvisorDriver: a memory
 * snapshot restored from S3 after the source and the local cache are gone (files, a process and the counter in
 * its memory intact), a tampered chunk refused with snapshot_corrupt, S3 stopped during a background upload (the
 * snapshot answers at once, shows `failed`, then `done` once S3 is back), a sandbox's deletion removing its unnamed
 * snapshot's objects, and a durable snapshot with S3 down
 * (refused with snapshot_store_unavailable, the sandbox keeps running).
 */
import { createHash } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ListObjectsV2Command, PutObjectCommand } from '@aws-sdk/client-s3';
import { GvisorDriver } from '@burrow/runtime-gvisor';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Burrow, createBurrow, loadConfig } from '../../packages/server/src/main.js';
import { GvisorTemplateBuilder } from '../../packages/server/src/node/gvisor-template-builder.js';
import { createS3Client } from '../../packages/server/src/services/s3-config.js';
import { DEFAULT_CHUNK_BYTES } from '../../packages/server/src/services/snapshot-manifest.js';
import { TcpGate } from '../../packages/server/src/testing/tcp-gate.js';
import { emptyTestPrefix, testS3 } from '../../packages/server/src/testing/test-s3.js';

const TEMPLATES_DIR = '/var/tmp/burrow-test-templates';
const s3 = testS3('snapshot-real');

/** One server over the real driver with its snapshots in S3 at `endpoint`. */
async function openServer(endpoint: string, durable: boolean) {
  const at = s3 as NonNullable<typeof s3>;
  const dataDir = await mkdtemp(join(tmpdir(), 'burrow-s3snap-'));
  const logger = pino({ level: process.env.BURROW_TEST_LOG ?? 'silent' });
  const driver = new GvisorDriver({ dataDir, logger });
  const burrow: Burrow = await createBurrow(
    loadConfig(
      {},
      {
        dataDir,
        templatesDir: TEMPLATES_DIR,
        snapshotStore: {
          location: { bucket: at.bucket, prefix: at.prefix },
          endpoint,
          region: at.region,
          cacheMiB: 10_240,
          durable,
        },
      },
    ),
    { driver, templateBuilder: new GvisorTemplateBuilder({ templatesDir: TEMPLATES_DIR }), logger },
  );
  await burrow.services.templates.ensureBase();
  const secret = await burrow.services.keys.ensureAdminKey();
  const headers = secret ? { authorization: `Bearer ${secret}` } : {};
  const call = async (method: 'GET' | 'POST' | 'DELETE', url: string, payload?: object) => {
    const res = await burrow.app.inject({ method, url: `/v1${url}`, headers, ...(payload ? { payload } : {}) });
    return { status: res.statusCode, body: res.body ? (JSON.parse(res.body) as Record<string, unknown>) : {} };
  };
  const exec = async (id: string, cmd: string) => {
    const res = await call('POST', `/sandboxes/${id}/exec`, { cmd });
    return { ...res, stdout: res.status === 200 ? Buffer.from(String(res.body.stdout), 'base64').toString() : '' };
  };
  const create = async (extra: object = {}) => {
    const res = await call('POST', '/sandboxes', { memoryMiB: 256, diskMiB: 256, ...extra });
    return res;
  };
  const close = async () => {
    for (const row of await burrow.store.sandboxes.listAcrossTenants()) {
      await driver.delete(row.id).catch((e: unknown) => console.error(e));
    }
    await burrow.close();
    await rm(dataDir, { recursive: true, force: true });
  };
  return { burrow, dataDir, call, exec, create, close };
}
type Server = Awaited<ReturnType<typeof openServer>>;

const upload = (body: Record<string, unknown>) => body.upload as { state: string; bytesLeft: number } | null;

describe.skipIf(s3 === null)('snapshots in the real S3 server over the real GvisorDriver', () => {
  const at = s3 as NonNullable<typeof s3>;
  let server: Server;

  beforeAll(async () => {
    server = await openServer(at.endpoint, false);
  });
  afterAll(async () => {
    await server?.close();
    await emptyTestPrefix(at);
  });

  test('restores from S3 with the source and the cache gone: files, process and memory intact', async () => {
    const { call, exec, create, dataDir } = server;
    const source = (await create()).body.id as string;
    await exec(source, 'echo from-s3 > /root/kept.txt');
    const counter =
      'python3 -c \'import http.server\nn=0\nclass H(http.server.BaseHTTPRequestHandler):\n  def do_GET(s):\n    global n\n    n+=1\n    b=str(n).encode()\n    s.send_response(200); s.send_header("Content-Length",str(len(b))); s.end_headers(); s.wfile.write(b)\n  def log_message(s,*a): pass\nhttp.server.HTTPServer(("127.0.0.1",8080),H).serve_forever()\'';
    expect((await call('POST', `/sandboxes/${source}/commands`, { cmd: counter })).status).toBe(201);
    const ask =
      'python3 -c \'import urllib.request;print(urllib.request.urlopen("http://127.0.0.1:8080", timeout=20).read().decode())\'';
    let first = '';
    for (let i = 0; i < 50 && first === ''; i++) {
      first = (await exec(source, `${ask} 2>/dev/null || true`)).stdout.trim();
      if (first === '') await new Promise((r) => setTimeout(r, 100));
    }
    expect(first).toBe('1');
    const snap = await call('POST', `/sandboxes/${source}/snapshots`, { name: 's3-restore' });
    expect(snap.status, JSON.stringify(snap.body)).toBe(201);
    expect(['pending', 'done']).toContain(upload(snap.body)?.state);
    await expect
      .poll(async () => upload((await call('GET', '/snapshots/s3-restore')).body)?.state, { timeout: 120_000 })
      .toBe('done');
    expect((await call('DELETE', `/sandboxes/${source}`)).status).toBe(204);
    const cache = join(dataDir, 'snapshot-cache');
    expect(await readdir(cache)).toContain(snap.body.id);
    await rm(join(cache, snap.body.id as string), { recursive: true, force: true });

    const restored = await create({ fromSnapshot: 's3-restore' });
    expect(restored.status, JSON.stringify(restored.body)).toBe(201);
    const id = restored.body.id as string;
    expect(await readdir(cache)).toContain(snap.body.id);
    expect((await exec(id, 'cat /root/kept.txt')).stdout).toBe('from-s3\n');
    // The counter continues from its memory: the process came back, not a new one.
    expect((await exec(id, ask)).stdout.trim()).toBe('2');
    await call('DELETE', `/sandboxes/${id}`);
    expect((await call('DELETE', '/snapshots/s3-restore')).status).toBe(204);
  }, 240_000);

  test('a tampered chunk refuses the restore with snapshot_corrupt; deleting the sandbox deletes its unnamed snapshot in S3', async () => {
    const { call, exec, create, dataDir, burrow } = server;
    const source = (await create()).body.id as string;
    await exec(source, 'head -c 3000000 /dev/urandom > /root/noise');
    const snap = await call('POST', `/sandboxes/${source}/snapshots`, { name: 's3-tampered', memory: false });
    expect(snap.status, JSON.stringify(snap.body)).toBe(201);
    const id = snap.body.id as string;
    await expect
      .poll(async () => upload((await call('GET', `/snapshots/${id}`)).body)?.state, { timeout: 120_000 })
      .toBe('done');
    const manifest = await readFile(join(dataDir, 'snapshot-cache', '.state', `${id}.manifest.json`), 'utf8');
    const disk = (JSON.parse(manifest).entries as Array<{ path: string; chunks: string[] }>).find(
      (e) => e.path === 'disk.img',
    );
    const client = createS3Client({ endpoint: at.endpoint, region: at.region });
    // Every chunk of the disk but the all-zero one (shared with every other snapshot in the prefix).
    const zero = createHash('sha256').update(new Uint8Array(DEFAULT_CHUNK_BYTES)).digest('hex');
    const tampered = [...new Set(disk?.chunks ?? [])].filter((h) => h !== zero);
    expect(tampered.length).toBeGreaterThan(0);
    for (const hash of tampered) {
      await client.send(
        new PutObjectCommand({ Bucket: at.bucket, Key: `${at.prefix}/chunks/${hash}`, Body: 'not the bytes' }),
      );
    }
    client.destroy();
    await rm(join(dataDir, 'snapshot-cache', id), { recursive: true, force: true });
    const before = (await burrow.store.sandboxes.listAcrossTenants()).length;
    const refused = await create({ fromSnapshot: 's3-tampered', restoreMemory: false });
    expect(refused.status, JSON.stringify(refused.body)).toBe(422);
    expect((refused.body.error as { code: string }).code).toBe('snapshot_corrupt');
    const rows = await burrow.store.sandboxes.listAcrossTenants();
    expect(rows.filter((r) => r.state === 'running').length).toBeLessThanOrEqual(before);
    expect(await readdir(join(dataDir, 'snapshot-cache'))).not.toContain(id);
    // Deleting the sandbox deletes its unnamed snapshot's objects in S3; the named one stays.
    const unnamed = await call('POST', `/sandboxes/${source}/snapshots`, { memory: false });
    expect(unnamed.status, JSON.stringify(unnamed.body)).toBe(201);
    await expect
      .poll(async () => upload((await call('GET', `/snapshots/${unnamed.body.id}`)).body)?.state, { timeout: 120_000 })
      .toBe('done');
    const manifests = async () => {
      const c = createS3Client({ endpoint: at.endpoint, region: at.region });
      const page = await c.send(new ListObjectsV2Command({ Bucket: at.bucket, Prefix: `${at.prefix}/manifests/` }));
      c.destroy();
      return (page.Contents ?? []).map((o) => o.Key as string);
    };
    expect(await manifests()).toContain(`${at.prefix}/manifests/${unnamed.body.id}.json`);
    expect((await call('DELETE', `/sandboxes/${source}`)).status).toBe(204);
    const left = await manifests();
    expect(left).not.toContain(`${at.prefix}/manifests/${unnamed.body.id}.json`);
    expect(left).toContain(`${at.prefix}/manifests/${id}.json`);
  }, 240_000);

  describe('with S3 behind a gate the test shuts', () => {
    let gate: TcpGate;
    let gated: Server;
    let durable: Server;

    beforeAll(async () => {
      gate = new TcpGate('127.0.0.1', Number(new URL(at.endpoint).port));
      const endpoint = await gate.open();
      gated = await openServer(endpoint, false);
      durable = await openServer(endpoint, true);
    });
    afterAll(async () => {
      await gate?.shut();
      await gated?.close();
      await durable?.close();
    });

    test('S3 stopped during the upload: the snapshot answers at once, shows failed, and is done once S3 is back', async () => {
      const { call, exec, create } = gated;
      const id = (await create()).body.id as string;
      await exec(id, 'echo while-down > /root/d.txt');
      await gate.shut();
      const snap = await call('POST', `/sandboxes/${id}/snapshots`, { name: 's3-outage' });
      expect(snap.status, JSON.stringify(snap.body)).toBe(201);
      await expect
        .poll(async () => upload((await call('GET', '/snapshots/s3-outage')).body)?.state, { timeout: 60_000 })
        .toBe('failed');
      const failed = (await call('GET', '/snapshots/s3-outage')).body.upload as { error: { code: string } };
      expect(failed.error.code).toBe('snapshot_store_unavailable');
      // The local copy serves a restore meanwhile.
      const local = await create({ fromSnapshot: 's3-outage', restoreMemory: false });
      expect(local.status, JSON.stringify(local.body)).toBe(201);
      expect((await exec(local.body.id as string, 'cat /root/d.txt')).stdout).toBe('while-down\n');
      await gate.open();
      await expect
        .poll(async () => upload((await call('GET', '/snapshots/s3-outage')).body)?.state, { timeout: 120_000 })
        .toBe('done');
    }, 240_000);

    test('a durable snapshot with S3 down fails with snapshot_store_unavailable and the sandbox keeps running', async () => {
      const { call, exec, create } = durable;
      await gate.open().catch(() => undefined);
      const id = (await create()).body.id as string;
      await exec(id, 'echo still-here > /root/r.txt');
      await gate.shut();
      const refused = await call('POST', `/sandboxes/${id}/snapshots`, { name: 's3-durable' });
      expect(refused.status, JSON.stringify(refused.body)).toBe(503);
      expect((refused.body.error as { code: string }).code).toBe('snapshot_store_unavailable');
      expect((await call('GET', '/snapshots/s3-durable')).status).toBe(404);
      expect((await call('GET', `/sandboxes/${id}`)).body.state).toBe('running');
      expect((await exec(id, 'cat /root/r.txt')).stdout).toBe('still-here\n');
    }, 240_000);
  });
});
