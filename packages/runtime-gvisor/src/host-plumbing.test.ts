/**
 * `mountDiskImage` on a real 64 MiB ext4 image (loop device, mount; root, no runsc); `goferGone` on a stand-in pids cgroup (a temp dir with a `cgroup.procs` file) listing real host processes: this
 * test process as the "sentry" and a `sh … gofer` child as the "gofer". Fast; no runsc.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import {
  createDiskImage,
  goferGone,
  loopAutoclear,
  loopDevicesUnder,
  loopDirectIo,
  mountDiskImage,
  mountOverlay,
  unmountAll,
} from './host-plumbing.js';

describe('goferGone', () => {
  let dir = '';
  let gofer: ChildProcess;
  const procs = (pids: number[]) => writeFile(join(dir, 'cgroup.procs'), pids.map((p) => `${p}\n`).join(''));

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'burrow-gofer-'));
    gofer = spawn('sh', ['-c', 'sleep 30', 'gofer'], { stdio: 'ignore' });
  });
  afterAll(async () => {
    gofer.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
  });

  test('the sentry with a gofer beside it: not gone', async () => {
    await procs([process.pid, gofer.pid ?? 0]);
    expect(await goferGone(dir, process.pid)).toBe(false);
  });

  test('the sentry alone: gone', async () => {
    await procs([process.pid]);
    expect(await goferGone(dir, process.pid)).toBe(true);
  });

  test('cannot tell (no cgroup, or a cgroup without the sentry): not gone', async () => {
    expect(await goferGone(join(dir, 'missing'), process.pid)).toBe(false);
    await procs([gofer.pid ?? 0]);
    expect(await goferGone(dir, process.pid)).toBe(false);
  });
});

describe('mountOverlay', () => {
  test('mounts nosuid,nodev: a setuid file a sandbox made means nothing to the host kernel', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'burrow-overlay-'));
    const [lowerDir, upperDir, workDir, mergedDir] = ['lower', 'upper', 'work', 'merged'].map((d) => join(dir, d)) as [
      string,
      string,
      string,
      string,
    ];
    try {
      for (const d of [lowerDir, upperDir, workDir, mergedDir]) await mkdir(d);
      await mountOverlay({ lowerDir, upperDir, workDir, mergedDir });
      try {
        const line = (await readFile('/proc/self/mountinfo', 'utf8'))
          .split('\n')
          .find((l) => l.split(' ')[4] === mergedDir);
        const options = (line?.split(' ')[5] ?? '').split(',');
        expect(options).toEqual(expect.arrayContaining(['nosuid', 'nodev']));
      } finally {
        execFileSync('umount', [mergedDir]);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('mountDiskImage', () => {
  /** Poll `check` every 20 ms until it holds, up to 10 s (autoclear detaches at the last close, just after umount). */
  const eventually = async (check: () => Promise<boolean>): Promise<boolean> => {
    for (const deadline = Date.now() + 10_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 20))) {
      if (await check()) return true;
    }
    return check();
  };

  test('attaches the image with direct I/O and autoclear: one cache, and the device is gone at unmount', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'burrow-disk-'));
    const image = join(dir, 'disk.img');
    const mountDir = join(dir, 'disk');
    try {
      await mkdir(mountDir);
      await createDiskImage(image, 64);
      await mountDiskImage(image, mountDir);
      const devices = await loopDevicesUnder(dir);
      expect(devices).toHaveLength(1);
      const device = devices[0] as string;
      expect(await loopDirectIo(device)).toBe(true);
      expect(await loopAutoclear(device)).toBe(true);
      const line = (await readFile('/proc/self/mountinfo', 'utf8'))
        .split('\n')
        .find((l) => l.split(' ')[4] === mountDir);
      expect(line?.split(' ')[5]?.split(',')).toEqual(expect.arrayContaining(['nosuid', 'nodev']));
      // Written through the loop device with O_DIRECT, read back after a remount from the image itself.
      await writeFile(join(mountDir, 'note'), 'kept');
      await unmountAll(mountDir);
      expect(await eventually(async () => (await loopDevicesUnder(dir)).length === 0)).toBe(true);
      await mountDiskImage(image, mountDir);
      expect(await readFile(join(mountDir, 'note'), 'utf8')).toBe('kept');
      await unmountAll(mountDir);
      expect(await eventually(async () => (await loopDevicesUnder(dir)).length === 0)).toBe(true);
    } finally {
      await unmountAll(dir);
      for (const device of await loopDevicesUnder(dir)) execFileSync('losetup', ['-d', device]);
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('an image that is not ext4 fails to mount and leaves no loop device behind', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'burrow-disk-'));
    const image = join(dir, 'disk.img');
    const mountDir = join(dir, 'disk');
    try {
      await mkdir(mountDir);
      await writeFile(image, Buffer.alloc(4 * 1024 * 1024));
      await expect(mountDiskImage(image, mountDir)).rejects.toThrow(/mounting the disk image/);
      expect(await loopDevicesUnder(dir)).toEqual([]);
    } finally {
      await unmountAll(dir);
      for (const device of await loopDevicesUnder(dir)) execFileSync('losetup', ['-d', device]);
      await rm(dir, { recursive: true, force: true });
    }
  });
});
