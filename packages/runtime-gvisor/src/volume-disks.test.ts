import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loopDevicesUnder, mountsUnder } from './host-plumbing.js';
import { LoopVolumeHost } from './volume-disks.js';

const ID = (n: number) => `vol_vhtest${String(n).padStart(14, '0')}`;

describe('LoopVolumeHost (real loop devices and ext4)', () => {
  let dir = '';
  let host: LoopVolumeHost;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'burrow-volhost-'));
    host = new LoopVolumeHost(dir);
  });
  afterAll(async () => {
    for (const id of await host.list()) await host.delete(id);
    expect(await mountsUnder(dir)).toEqual([]);
    expect(await loopDevicesUnder(dir)).toEqual([]);
    await rm(dir, { recursive: true, force: true });
  });

  it('makes a mounted filesystem of the size asked, with ENOSPC at its limit', async () => {
    await host.create(ID(1), 64);
    const usage = await host.usage(ID(1));
    expect(usage.limitBytes).toBeGreaterThan(50 * 1024 * 1024);
    expect(usage.limitBytes).toBeLessThanOrEqual(64 * 1024 * 1024);
    await expect(writeFile(join(host.rootDir(ID(1)), 'big'), Buffer.alloc(70 * 1024 * 1024, 1))).rejects.toMatchObject({
      code: 'ENOSPC',
    });
    await rm(join(host.rootDir(ID(1)), 'big'));
    // create again is a no-op on a mounted volume
    await host.create(ID(1), 64);
    expect(await mountsUnder(join(dir, ID(1)))).toHaveLength(1);
  });

  it('grows while mounted and refuses to shrink', async () => {
    await host.grow(ID(1), 128);
    expect((await host.usage(ID(1))).limitBytes).toBeGreaterThan(100 * 1024 * 1024);
    await expect(host.grow(ID(1), 64)).rejects.toThrow(/cannot shrink/);
  });

  it('copies a point in time; the copy diverges and a read-only copy refuses writes', async () => {
    await writeFile(join(host.rootDir(ID(1)), 'a'), 'one');
    const { method } = await host.copy(ID(1), ID(2), { readOnly: true });
    expect(['reflink', 'sparse-copy']).toContain(method);
    await host.copy(ID(1), ID(3), { readOnly: false });
    await writeFile(join(host.rootDir(ID(1)), 'a'), 'two');
    await writeFile(join(host.rootDir(ID(3)), 'a'), 'three');
    expect(await readFile(join(host.rootDir(ID(2)), 'a'), 'utf8')).toBe('one');
    expect(await readFile(join(host.rootDir(ID(3)), 'a'), 'utf8')).toBe('three');
    await expect(writeFile(join(host.rootDir(ID(2)), 'b'), 'x')).rejects.toMatchObject({ code: 'EROFS' });
  });

  it('mounts again after an unmount (a restart) with the same bytes, and deletes without leftovers', async () => {
    const before = createHash('sha256')
      .update(await readFile(join(host.rootDir(ID(1)), 'a')))
      .digest('hex');
    await host.delete(ID(3));
    const { unmountAll, detachLoopDevices } = await import('./host-plumbing.js');
    await unmountAll(join(dir, ID(1)));
    await detachLoopDevices(join(dir, ID(1)));
    await host.ensureMounted(ID(1));
    const after = createHash('sha256')
      .update(await readFile(join(host.rootDir(ID(1)), 'a')))
      .digest('hex');
    expect(after).toBe(before);
    expect(await host.list()).toEqual([ID(1), ID(2)]);
  });
});
