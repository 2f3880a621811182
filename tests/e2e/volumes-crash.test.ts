/**
 * A real `burrow server` killed with SIGKILL inside volume create, inside a volume copy (with the source frozen),
 * and between a sandbox's mount rows and its start; after each restart no half volume, no frozen filesystem, no
 * mount or loop device is left that no volume explains, and deleting everything returns the data dir's disk use to
 * where it started.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { loopDevicesUnder, mountsUnder } from '../../packages/runtime-gvisor/src/host-plumbing.js';
import { type ServerProcess, setupDataDir, startServerProcess, stopServerProcess } from './server-process.js';

let dataDir = '';
let adminKey = '';
let server: ServerProcess | null = null;

// biome-ignore lint/suspicious/noExplicitAny: the test reads answer JSON by field names it checks itself
async function api(method: string, path: string, body?: object): Promise<{ status: number; body: any }> {
  const current = server;
  if (current === null) throw new Error('no server');
  const res = await fetch(`${current.url}/v1${path}`, {
    method,
    headers: { authorization: `Bearer ${adminKey}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : {} };
}

/** Send `request` to a server armed at `point`, see it die of SIGKILL, and start a fresh one on the data dir. */
async function crashAt(point: string, request: () => Promise<unknown>): Promise<void> {
  await stopServerProcess(server);
  server = await startServerProcess({ dataDir, env: { BURROW_TEST_CRASH_AT: point } });
  const current = server;
  const answered = await request().then(
    () => 'answered',
    () => 'connection lost',
  );
  const exit = await current.exited;
  expect({ point, answered, signal: exit.signal }).toEqual({ point, answered: 'connection lost', signal: 'SIGKILL' });
  server = await startServerProcess({ dataDir });
}

/** Volume storage on the host that no ready volume row explains, and frozen filesystems. */
async function volumeLeaks(): Promise<string[]> {
  const rows = new Set(((await api('GET', '/volumes?limit=200')).body.items as Array<{ id: string }>).map((v) => v.id));
  const volumesDir = join(dataDir, 'volumes');
  const problems: string[] = [];
  const names = (() => {
    try {
      return readdirSync(volumesDir);
    } catch {
      return [];
    }
  })();
  for (const name of names) if (!rows.has(name)) problems.push(`directory ${name}`);
  for (const point of await mountsUnder(volumesDir)) {
    const id = point.slice(volumesDir.length + 1).split('/')[0] ?? '';
    if (!rows.has(id)) problems.push(`mount ${point}`);
  }
  for (const device of await loopDevicesUnder(volumesDir))
    problems.push(...(rows.size === 0 ? [`loop ${device}`] : []));
  return problems;
}

function duKiB(dir: string): number {
  return Number.parseInt(execFileSync('du', ['-sk', dir]).toString().split('\t')[0] ?? '0', 10);
}

/** Each cycle starts the server twice (a start takes 10-40 s on a loaded 2-core host). */
const CYCLE_TIMEOUT_MS = 300_000;

describe('volumes survive a kill -9 of the server (real runsc)', () => {
  let startKiB = 0;
  beforeAll(async () => {
    ({ dataDir, adminKey } = await setupDataDir('burrow-volcrash-'));
    server = await startServerProcess({ dataDir });
    startKiB = duKiB(dataDir);
  }, CYCLE_TIMEOUT_MS);
  afterAll(async () => {
    await stopServerProcess(server);
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  test(
    'create: killed before and after the storage is made; nothing of it is left',
    async () => {
      for (const point of ['volume-create:after-row', 'volume-create:after-storage']) {
        await crashAt(point, () => api('POST', '/volumes', { name: 'half', sizeMiB: 32 }));
        expect((await api('GET', '/volumes/half')).status).toBe(404);
        expect(await volumeLeaks()).toEqual([]);
      }
    },
    CYCLE_TIMEOUT_MS,
  );

  test(
    'copy: killed with the source frozen; the source thaws and takes writes, the copy is gone',
    async () => {
      expect((await api('POST', '/volumes', { name: 'src', sizeMiB: 32 })).status).toBe(201);
      const put = await fetch(`${server?.url}/v1/volumes/src/files/content?path=/a.txt`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${adminKey}`, 'content-type': 'application/octet-stream' },
        body: 'before',
      });
      expect(put.status).toBe(200);
      await crashAt('volume-copy:frozen', () => api('POST', '/volumes/src/snapshots', { name: 'src-snap' }));
      expect((await api('GET', '/volumes/src-snap')).status).toBe(404);
      expect(await volumeLeaks()).toEqual([]);
      // A write that would block forever on a frozen filesystem returns.
      const after = await fetch(`${server?.url}/v1/volumes/src/files/content?path=/b.txt`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${adminKey}`, 'content-type': 'application/octet-stream' },
        body: 'after',
        signal: AbortSignal.timeout(20_000),
      });
      expect(after.status).toBe(200);
      expect((await api('POST', '/volumes/src/snapshots', { name: 'src-snap' })).status).toBe(201);
    },
    CYCLE_TIMEOUT_MS,
  );

  test(
    'mount: killed between the mount rows and the start; the volume mounts read-write again',
    async () => {
      await crashAt('create:after-volume-mount-rows', () =>
        api('POST', '/sandboxes', { memoryMiB: 256, volumes: [{ name: 'src', path: '/data' }] }),
      );
      const holders = (await api('GET', '/volumes/src')).body.mounts;
      expect(holders).toEqual([]);
      const created = await api('POST', '/sandboxes', { memoryMiB: 256, volumes: [{ name: 'src', path: '/data' }] });
      expect(created.status).toBe(201);
      expect((await api('DELETE', `/sandboxes/${created.body.id}`)).status).toBe(204);
      for (const v of (await api('GET', '/volumes?limit=200')).body.items) {
        expect((await api('DELETE', `/volumes/${v.id}`)).status).toBe(204);
      }
      expect(await volumeLeaks()).toEqual([]);
      expect(await mountsUnder(join(dataDir, 'volumes'))).toEqual([]);
      expect(await loopDevicesUnder(join(dataDir, 'volumes'))).toEqual([]);
      // Disk use returns to where it started (the database and logs grow a little).
      expect(duKiB(dataDir) - startKiB).toBeLessThan(20 * 1024);
    },
    CYCLE_TIMEOUT_MS,
  );
});
