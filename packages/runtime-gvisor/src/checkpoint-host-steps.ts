import { randomBytes } from 'node:crypto';
import { link, mkdir, readdir, readFile, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { RuntimeError } from '@burrow/runtime';
import { copySparse } from './checkpoint-files.js';
import { loopDevicesUnder, mountsUnder, mustRun, processAlive } from './host-plumbing.js';
import { runCommand } from './run-command.js';

/** SIGKILL a host process and wait until it has exited (a zombie counts: its files are closed). */
export async function killAndWait(pid: number, timeoutMs = 10_000): Promise<void> {
  if (pid <= 0) return;
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    return;
  }
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!(await processAlive(pid))) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new RuntimeError(`process ${pid} did not exit after SIGKILL`);
}

/** Name prefix of a spent pause image moved aside by {@link dropSpentImage} (removed by `settle` after a crash). */
export const SPENT_PREFIX = 'spent-';

/**
 * Move a restored pause image out of the way at once (a rename) and delete it in the background: deleting a
 * 543 MB image takes 0.45–0.55 s of the resume here. A crash before the delete ends leaves a `spent-*` directory
 * that `settle` removes.
 */
export async function dropSpentImage(paths: { dir: string; checkpointDir: string }): Promise<void> {
  await dropAside(paths.checkpointDir, paths.dir);
}

/**
 * Rename `path` to a `spent-*` name in `sandboxDir` (at once) and delete it in the background (a fork point's
 * removal takes 5–280 ms of a loaded fork). A crash before the delete ends leaves it for `settle`; a missing `path`
 * is fine.
 */
export async function dropAside(path: string, sandboxDir: string): Promise<void> {
  const spent = join(sandboxDir, `${SPENT_PREFIX}${randomBytes(6).toString('hex')}`);
  try {
    await rename(path, spent);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw error;
  }
  void rm(spent, { recursive: true, force: true }).catch(() => undefined);
}

/**
 * Unmount everything under each of `dirs`, in that order (the overlay before the disk it lives on), retrying while
 * busy; never lazily, so the disk really is released. One `umount` process takes every mount point (a process
 * start costs 5–40 ms here).
 */
export async function unmountStrict(...dirs: string[]): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    const points = (await Promise.all(dirs.map((dir) => mountsUnder(dir)))).flat();
    if (points.length === 0) return;
    if (attempt === 50) throw new RuntimeError(`cannot unmount ${points.join(', ')}: busy`);
    if (attempt > 0) await new Promise((resolve) => setTimeout(resolve, 20));
    // A busy point fails alone (umount goes on with the next and exits non-zero): the loop looks again.
    await runCommand('umount', points);
  }
}

/** How often {@link waitForDiskRelease} asks `losetup -d` again while it polls sysfs, ms. */
const DETACH_AGAIN_MS = 250;

/**
 * Wait until the disk's loop device is gone. The gofer and sentry hold the filesystem in their own mount
 * namespaces, so it stays alive (and is written to at its final unmount) after the host unmount until they have
 * exited; only then is the disk image frozen. Its end is seen by polling sysfs every 5 ms, which starts no
 * process. A device not yet marked autoclear is detached with `losetup -d` (at once and every
 * {@link DETACH_AGAIN_MS}); one that is (`mount -o loop` marks it so) needs no `losetup` process (a process start
 * costs 5–40 ms here).
 */
export async function waitForDiskRelease(sandboxDir: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let detachAt = 0;
  for (;;) {
    const left = await loopDevicesUnder(sandboxDir);
    if (left.length === 0) return;
    if (Date.now() >= detachAt) {
      for (const device of left) {
        if (!(await autoclearSet(device))) await runCommand('losetup', ['-d', device]);
      }
      detachAt = Date.now() + DETACH_AGAIN_MS;
    }
    if (Date.now() > deadline) throw new RuntimeError(`the disk is still in use: ${left.join(', ')}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** Whether the kernel detaches loop device `device` (`/dev/loopN`) at its last close (sysfs `loop/autoclear`). */
async function autoclearSet(device: string): Promise<boolean> {
  const flag = await readFile(`/sys/block/${device.slice('/dev/'.length)}/loop/autoclear`, 'utf8').catch(() => '');
  return flag.trim() === '1';
}

/** Write back everything cached for the overlay and the disk, so a copy of the disk image sees it. */
export async function flushDisk(rootfs: string, diskDir: string): Promise<void> {
  await mustRun('sync', ['-f', rootfs, diskDir], 'syncing the disk');
}

/** Rename `from` to `to`, copying (sparse) and removing `from` when they are on different filesystems. */
export async function moveFile(from: string, to: string): Promise<void> {
  try {
    await rename(from, to);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EXDEV') throw error;
    await copySparse(from, to);
    await rm(from, { force: true });
  }
}

/** Hard-link every file of `from` into a new `to` (images are immutable), copying across filesystems. */
export async function linkOrCopyDir(from: string, to: string): Promise<void> {
  await mkdir(to, { recursive: true });
  for (const name of await readdir(from)) {
    await link(join(from, name), join(to, name)).catch(async (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EXDEV') throw error;
      await copySparse(join(from, name), join(to, name));
    });
  }
}
