/**
 * Volumes with fork and snapshots over the real GvisorDriver: a fork child gets a copy of a read-write volume, the
 * parent's volume read-only, or a refusal; a volume snapshot taken while a writer runs holds whole lines only; a
 * volume fork diverges; the files API reads and writes a volume without a sandbox and a snapshot refuses writes.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GvisorDriver } from '@burrow/runtime-gvisor';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { loopDevicesUnder, mountsUnder } from '../../packages/runtime-gvisor/src/host-plumbing.js';
import { Sandbox, Volume } from '../../packages/sdk/src/index.js';
import { type Burrow, createBurrow, loadConfig } from '../../packages/server/src/main.js';
import { GvisorTemplateBuilder } from '../../packages/server/src/node/gvisor-template-builder.js';

const TEMPLATES_DIR = '/var/tmp/burrow-test-templates';
/** Sandbox creates take 3-30 s each on a loaded 2-core host. */
const TEST_TIMEOUT_MS = 300_000;

describe('volumes with fork and snapshots (real runsc)', { timeout: TEST_TIMEOUT_MS }, () => {
  let burrow: Burrow;
  let dataDir = '';
  let url = '';
  let key = '';
  const sandboxes: Sandbox[] = [];
  const conn = () => ({ apiUrl: url, apiKey: key });
  const sh = async (s: Sandbox, script: string) => {
    const result = await s.commands.run(script);
    return { out: result.stdout.trim(), err: result.stderr.trim(), code: result.exitCode };
  };

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'burrow-volumes-fork-'));
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
    for (const v of (await Volume.list({ ...conn(), limit: 200 }).catch(() => ({ items: [] }))).items) {
      await (await Volume.get(v.id, conn())).delete({ force: true }).catch(() => undefined);
    }
    await burrow?.close();
    expect(await mountsUnder(join(dataDir, 'volumes'))).toEqual([]);
    expect(await loopDevicesUnder(join(dataDir, 'volumes'))).toEqual([]);
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  test('fork: a copy per child (default), the same volume read-only, or a refusal; running and paused parents', async () => {
    await Volume.create({ ...conn(), name: 'base', sizeMiB: 32 });
    const parent = await Sandbox.create({ ...conn(), memoryMiB: 256, volumes: [{ name: 'base', path: '/data' }] });
    sandboxes.push(parent);
    await sh(parent, 'echo parent > /data/who');

    const [copy] = await parent.fork();
    sandboxes.push(copy as Sandbox);
    const child = copy as Sandbox;
    expect((await child.refresh()).volumes?.[0]?.name).toMatch(/^base-/);
    await sh(child, 'echo child > /data/who');
    expect((await sh(parent, 'cat /data/who')).out).toBe('parent');
    expect((await sh(child, 'cat /data/who')).out).toBe('child');

    const [shared] = await parent.fork({ volumes: 'share-readonly' });
    sandboxes.push(shared as Sandbox);
    const reader = shared as Sandbox;
    expect((await reader.refresh()).volumes?.[0]).toMatchObject({ name: 'base', readOnly: true });
    await sh(parent, 'echo again > /data/who');
    expect((await sh(reader, 'cat /data/who')).out).toBe('again');
    expect((await sh(reader, 'echo x > /data/who')).err).toContain('Read-only file system');

    const before = (await Sandbox.list({ ...conn() })).items.length;
    await expect(parent.fork({ volumes: 'refuse' })).rejects.toMatchObject({ code: 'volume_mount_conflict' });
    expect((await Sandbox.list({ ...conn() })).items.length).toBe(before);

    await parent.pause();
    const [fromPaused] = await parent.fork();
    sandboxes.push(fromPaused as Sandbox);
    expect((await sh(fromPaused as Sandbox, 'cat /data/who')).out).toBe('again');
    await parent.resume();
    expect((await sh(parent, 'cat /data/who')).out).toBe('again');
  });

  test('a volume snapshot taken while a writer runs holds whole lines; a fork of it diverges', async () => {
    const log = await Volume.create({ ...conn(), name: 'log', sizeMiB: 32 });
    const writer = await Sandbox.create({ ...conn(), memoryMiB: 256, volumes: [{ name: 'log', path: '/log' }] });
    sandboxes.push(writer);
    await writer.commands.run('i=0; while [ $i -lt 100000 ]; do i=$((i+1)); echo "line-$i-end" >> /log/lines; done', {
      background: true,
    });
    await new Promise((r) => setTimeout(r, 1500));
    const snap = await log.snapshot('log-at-1', { retentionMs: 3_600_000 });
    expect(snap.info).toMatchObject({ kind: 'snapshot', lineage: { sourceId: log.id } });
    expect(snap.info.expiresAt).not.toBeNull();
    const text = await snap.files.readText('/lines');
    const lines = text.split('\n').filter((l) => l !== '');
    expect(lines.length).toBeGreaterThan(10);
    lines.forEach((line, i) => {
      expect(line).toBe(`line-${i + 1}-end`);
    });
    await expect(snap.files.write('/x', 'no')).rejects.toMatchObject({ code: 'forbidden' });

    const fork = await snap.fork('log-fork');
    await fork.files.write('/mine.txt', 'fork only');
    expect(await fork.files.readText('/mine.txt')).toBe('fork only');
    await expect(log.files.readText('/mine.txt')).rejects.toMatchObject({ code: 'file_not_found' });
    const reader = await Sandbox.create({
      ...conn(),
      memoryMiB: 256,
      volumes: [{ name: 'log-at-1', path: '/snap', readOnly: true }],
    });
    sandboxes.push(reader);
    expect((await sh(reader, 'wc -l < /snap/lines')).out).toBe(String(lines.length));
    const listed = await Volume.list({ ...conn(), sourceId: log.id });
    expect(listed.items.map((v) => v.name)).toEqual(['log-at-1']);
  });

  test('the files API lists, writes, reads, tars and removes without a sandbox', async () => {
    const v = await Volume.create({ ...conn(), name: 'files', sizeMiB: 16 });
    await v.files.write('/dir/a.txt', 'alpha');
    expect((await v.files.list('/dir')).map((f) => f.name)).toEqual(['a.txt']);
    expect(await v.files.readText('/dir/a.txt')).toBe('alpha');
    const tar = await v.files.download('/dir');
    const bytes = new Uint8Array(await new Response(tar).arrayBuffer());
    const result = await v.files.upload('/copy', bytes);
    expect(result.issues).toEqual([]);
    expect(await v.files.readText('/copy/a.txt')).toBe('alpha');
    await v.files.remove('/dir', { recursive: true });
    await expect(v.files.stat('/dir')).rejects.toMatchObject({ code: 'file_not_found' });
    await expect(v.files.readText('/../../etc/passwd')).rejects.toMatchObject({ code: 'file_not_found' });
  });
});
