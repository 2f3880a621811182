/**
 * Volumes over the real GvisorDriver: the bytes a sandbox writes outlive it, read-only mounts refuse writes with
 * EROFS, a volume fills to ENOSPC without touching the sandbox's own disk, shared volumes take appends from two
 * sandboxes, mounts survive pause and resume, and every bad mount is refused with its code and nothing made.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GvisorDriver } from '@burrow/runtime-gvisor';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { loopDevicesUnder, mountsUnder } from '../../packages/runtime-gvisor/src/host-plumbing.js';
import { Sandbox } from '../../packages/sdk/src/index.js';
import { type Burrow, createBurrow, loadConfig } from '../../packages/server/src/main.js';
import { GvisorTemplateBuilder } from '../../packages/server/src/node/gvisor-template-builder.js';

const TEMPLATES_DIR = '/var/tmp/burrow-test-templates';
/** Sandbox creates take 3-30 s each on a loaded 2-core host. */
const TEST_TIMEOUT_MS = 300_000;

describe('volumes (real runsc)', { timeout: TEST_TIMEOUT_MS }, () => {
  let burrow: Burrow;
  let dataDir = '';
  let url = '';
  let key = '';
  const sandboxes: Sandbox[] = [];

  const api = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(`${url}/v1${path}`, {
      method,
      headers: {
        authorization: `Bearer ${key}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await response.text();
    return { status: response.status, body: text === '' ? null : JSON.parse(text) };
  };
  const sandbox = async (volumes: Array<{ name: string; path: string; readOnly?: boolean }>) => {
    const created = await Sandbox.create({ apiUrl: url, apiKey: key, memoryMiB: 256, volumes });
    sandboxes.push(created);
    return created;
  };
  const sh = async (s: Sandbox, script: string) => {
    const result = await s.commands.run(script);
    return { out: result.stdout.trim(), err: result.stderr.trim(), code: result.exitCode };
  };

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'burrow-volumes-real-'));
    const logger = pino({ level: process.env.BURROW_TEST_LOG ?? 'silent' });
    burrow = await createBurrow(
      loadConfig({}, { dataDir, templatesDir: TEMPLATES_DIR, warmPool: [], e2b: { apiPort: 0, envdPort: 0 } }),
      {
        driver: new GvisorDriver({ dataDir, logger }),
        templateBuilder: new GvisorTemplateBuilder({ templatesDir: TEMPLATES_DIR }),
        logger,
      },
    );
    await burrow.services.templates.ensureBase();
    key = (await burrow.services.keys.ensureAdminKey()) ?? '';
    url = await burrow.app.listen({ host: '127.0.0.1', port: 0 });
  });
  afterAll(async () => {
    for (const s of sandboxes) await s.delete().catch(() => undefined);
    const left = await api('GET', '/volumes?limit=200');
    for (const v of left.body?.items ?? []) await api('DELETE', `/volumes/${v.id}?force=true`);
    await burrow?.close();
    const volumesDir = join(dataDir, 'volumes');
    expect(await mountsUnder(volumesDir)).toEqual([]);
    expect(await loopDevicesUnder(volumesDir)).toEqual([]);
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  test('bytes written in A outlive A and read the same in B; a read-only mount refuses writes with EROFS', async () => {
    expect((await api('POST', '/volumes', { name: 'work', sizeMiB: 64, labels: { team: 'a' } })).status).toBe(201);
    const a = await sandbox([{ name: 'work', path: '/data' }]);
    const written = await sh(a, 'head -c 4194304 /dev/urandom > /data/blob && sha256sum /data/blob | cut -c1-64');
    expect(written.code).toBe(0);
    await a.delete();
    const b = await sandbox([{ name: 'work', path: '/mnt/work', readOnly: true }]);
    expect((await sh(b, 'sha256sum /mnt/work/blob | cut -c1-64')).out).toBe(written.out);
    const refused = await sh(b, 'echo x > /mnt/work/new');
    expect(refused.code).not.toBe(0);
    expect(refused.err).toContain('Read-only file system');
    const info = await api('GET', '/volumes/work');
    expect(info.body.mounts).toEqual([
      { volumeId: info.body.id, name: 'work', sandboxId: b.id, path: '/mnt/work', readOnly: true },
    ]);
    expect(info.body.usedBytes).toBeGreaterThanOrEqual(4 * 1024 * 1024);
    const got = await api('GET', `/sandboxes/${b.id}`);
    expect(got.body.volumes).toEqual(info.body.mounts);
    await b.delete();
  });

  test('a full volume gives ENOSPC inside; the sandbox disk and another volume still take writes', async () => {
    expect((await api('POST', '/volumes', { name: 'small', sizeMiB: 16 })).status).toBe(201);
    const c = await sandbox([
      { name: 'small', path: '/small' },
      { name: 'work', path: '/work' },
    ]);
    const fill = await sh(c, 'dd if=/dev/zero of=/small/fill bs=1M count=40 2>&1; echo rc=$?');
    expect(fill.out).toContain('No space left on device');
    expect((await sh(c, 'echo ok > /root/own && echo ok > /work/other && cat /root/own /work/other')).out).toBe(
      'ok\nok',
    );
    const usage = (await api('GET', '/volumes/small')).body;
    expect(usage.usedBytes).toBeLessThanOrEqual(16 * 1024 * 1024);
  });

  test('bad mounts are refused with stable codes and nothing is made', async () => {
    const before = (await api('GET', '/sandboxes')).body.items.length;
    const cases: Array<[unknown, number, string]> = [
      [[{ name: 'work', path: 'data' }], 400, 'volume_mount_invalid'],
      [[{ name: 'work', path: '/proc/x' }], 400, 'volume_mount_invalid'],
      [[{ name: 'work', path: '/dev' }], 400, 'volume_mount_invalid'],
      [[{ name: 'work', path: '/.burrow-agent/x' }], 400, 'volume_mount_invalid'],
      [[{ name: 'work', path: '/a/../b' }], 400, 'volume_mount_invalid'],
      [
        [
          { name: 'work', path: '/a', readOnly: true },
          { name: 'small', path: '/a/b', readOnly: true },
        ],
        400,
        'volume_mount_invalid',
      ],
      [[{ name: 'nope', path: '/data' }], 404, 'volume_not_found'],
      // /work is mounted read-write by the sandbox of the previous test; `work` is not shared.
      [[{ name: 'work', path: '/data' }], 409, 'volume_mount_conflict'],
    ];
    for (const [volumes, status, code] of cases) {
      const answer = await api('POST', '/sandboxes', { volumes });
      expect({ volumes, status: answer.status, code: answer.body.error.code }).toEqual({ volumes, status, code });
    }
    expect((await api('GET', '/sandboxes')).body.items.length).toBe(before);
    // Another tenant's volume answers as unknown.
    const other = await api('POST', '/keys', { name: 'other', tenantId: 'volumes-other' });
    const otherKey = other.body.secret as string;
    const foreign = await fetch(`${url}/v1/volumes/work`, { headers: { authorization: `Bearer ${otherKey}` } });
    expect(foreign.status).toBe(404);
    expect(((await foreign.json()) as { error: { code: string } }).error.code).toBe('volume_not_found');
  });

  test('a shared volume takes appends from two sandboxes; flock is per sandbox, mkdir locks span them', async () => {
    expect((await api('POST', '/volumes', { name: 'shared', sizeMiB: 32, shared: true })).status).toBe(201);
    const d = await sandbox([{ name: 'shared', path: '/shared' }]);
    const e = await sandbox([{ name: 'shared', path: '/shared' }]);
    const writer = (tag: string) =>
      `for i in $(seq 1 50); do echo ${tag}$i >> /shared/own-${tag}; flock /shared/lock sh -c 'echo ${tag}$0 >> /shared/one' $i; done`;
    await Promise.all([sh(d, writer('d')), sh(e, writer('e'))]);
    const counted = await sh(
      d,
      'wc -l < /shared/own-d; wc -l < /shared/own-e; wc -l < /shared/one; sort /shared/one | uniq | wc -l',
    );
    expect(counted.out.split('\n')).toEqual(['50', '50', '100', '100']);
    // flock is per sandbox (each gVisor kernel keeps its own lock table): E takes the lock D holds. The appends
    // above lose nothing because each is one O_APPEND write the host applies whole. mkdir is the host's, and
    // atomic across sandboxes: a lock directory works.
    const held = sh(d, 'flock /shared/lk sleep 3');
    await new Promise((r) => setTimeout(r, 1500));
    expect((await sh(e, 'flock -n /shared/lk true; echo $?')).out).toBe('0');
    await held;
    expect((await sh(d, 'mkdir /shared/lockdir && echo got')).out).toBe('got');
    expect((await sh(e, 'mkdir /shared/lockdir 2>/dev/null && echo got || echo busy')).out).toBe('busy');
    // What one sandbox writes the other reads at once (gVisor revalidates shared mounts on each lookup).
    await sh(d, 'echo first > /shared/seen');
    expect((await sh(e, 'cat /shared/seen')).out).toBe('first');
    await sh(e, 'echo second > /shared/seen');
    expect((await sh(d, 'cat /shared/seen')).out).toBe('second');
  });

  test('a paused sandbox keeps its mounts; after resume it reads and writes them', async () => {
    const c = sandboxes.find((s) => s.info?.volumes?.some((v) => v.path === '/work'));
    expect(c).toBeDefined();
    const s = c as Sandbox;
    await sh(s, 'echo before > /work/pause-test');
    expect((await api('POST', `/sandboxes/${s.id}/pause`)).status).toBe(200);
    expect((await api('POST', `/sandboxes/${s.id}/resume`)).status).toBe(200);
    expect((await sh(s, 'cat /work/pause-test; echo after >> /work/pause-test; cat /work/pause-test')).out).toBe(
      'before\nbefore\nafter',
    );
  });

  test('delete is refused while mounted, force only detaches from stopped sandboxes; the quota counts volumes', async () => {
    const holder = (await api('GET', '/volumes/small')).body.mounts[0].sandboxId as string;
    expect((await api('DELETE', '/volumes/small')).body.error.code).toBe('volume_in_use');
    expect((await api('DELETE', '/volumes/small?force=true')).body.error.code).toBe('volume_in_use');
    expect((await api('POST', `/sandboxes/${holder}/stop`)).status).toBe(200);
    expect((await api('DELETE', '/volumes/small?force=true')).status).toBe(204);
    expect((await api('GET', '/volumes/small')).status).toBe(404);
    const quota = (await api('GET', '/quota')).body;
    expect(quota.usage.volumes).toBe(2);
    expect(quota.usage.volumeBytes).toBe((64 + 32) * 1024 * 1024);
    await api('PUT', '/tenants/default/quota', { maxVolumes: 2 });
    const over = await api('POST', '/volumes', { name: 'third', sizeMiB: 16 });
    expect([over.status, over.body.error.code]).toEqual([429, 'quota_exceeded']);
    await api('PUT', '/tenants/default/quota', {});
    expect((await api('POST', '/volumes', { name: 'work', sizeMiB: 16 })).body.error.code).toBe('volume_exists');
  });

  test('resize grows and refuses to shrink; list filters by label and pages with a cursor', async () => {
    expect((await api('POST', '/volumes/shared/resize', { sizeMiB: 16 })).body.error.code).toBe(
      'volume_shrink_refused',
    );
    for (const s of sandboxes) await s.delete().catch(() => undefined);
    const grown = await api('POST', '/volumes/shared/resize', { sizeMiB: 48 });
    expect([grown.status, grown.body.sizeMiB]).toEqual([200, 48]);
    const d = await sandbox([{ name: 'shared', path: '/shared' }]);
    expect((await sh(d, 'wc -l < /shared/one; df -m /shared | tail -1 | tr -s " " | cut -d" " -f2')).out).toMatch(
      /^100\n4\d$/,
    );
    const labelled = await api('GET', '/volumes?label=team=a');
    expect(labelled.body.items.map((v: { name: string }) => v.name)).toEqual(['work']);
    const first = await api('GET', '/volumes?limit=1');
    expect(first.body.items).toHaveLength(1);
    const second = await api('GET', `/volumes?limit=1&cursor=${first.body.nextCursor}`);
    expect(second.body.items[0].id).not.toBe(first.body.items[0].id);
  });
});
