import { mkdir, open, readdir, rename, rm, stat, statfs } from 'node:fs/promises';
import { join } from 'node:path';
import { crashPoint, RuntimeError, type VolumeHost, type VolumeUsage } from '@burrow/runtime';
import {
  createDiskImage,
  detachLoopDevices,
  fileExists,
  loopDevicesUnder,
  mountsUnder,
  mustRun,
  unmountAll,
} from './host-plumbing.js';
import { runCommand } from './run-command.js';

/** A volume id: `vol_` + 20 lowercase base32 characters (a path component, never anything else). */
const VOLUME_ID = /^vol_[0-9a-hjkmnp-tv-z]{20}$/;

/** Host paths of one volume. */
interface VolumePaths {
  dir: string;
  /** The ext4 image (sparse); `image.partial` while it is being made. */
  image: string;
  partial: string;
  /** Where the image is mounted on the host. */
  mountDir: string;
  /** The volume's root inside the filesystem (what sandboxes and file calls see; `lost+found` stays outside it). */
  root: string;
}

/**
 * Volumes as sparse ext4 images on loop devices under `<volumesDir>/<id>/`, each mounted at `mnt/` for as long as
 * the volume exists: the size limit is the filesystem's (ENOSPC inside a sandbox and for file calls, as with
 * sandbox disks), and a sandbox binds `mnt/data`. Copies freeze the source filesystem (`fsfreeze`) and copy the
 * image, sharing blocks (`cp --reflink`) where the host filesystem can, else copying the allocated ones.
 */
export class LoopVolumeHost implements VolumeHost {
  constructor(private readonly volumesDir: string) {}

  private paths(volumeId: string): VolumePaths {
    if (!VOLUME_ID.test(volumeId)) throw new RuntimeError(`not a volume id: ${volumeId}`);
    const dir = join(this.volumesDir, volumeId);
    const mountDir = join(dir, 'mnt');
    return {
      dir,
      image: join(dir, 'volume.img'),
      partial: join(dir, 'volume.img.partial'),
      mountDir,
      root: join(mountDir, 'data'),
    };
  }

  rootDir(volumeId: string): string {
    return this.paths(volumeId).root;
  }

  async create(volumeId: string, sizeMiB: number, options: { readOnly?: boolean } = {}): Promise<void> {
    const paths = this.paths(volumeId);
    try {
      if (!(await fileExists(paths.image))) {
        await mkdir(paths.dir, { recursive: true });
        await rm(paths.partial, { force: true });
        await createDiskImage(paths.partial, sizeMiB);
        await this.initRoot(paths.partial, paths);
        await rename(paths.partial, paths.image);
      }
      await this.ensureMounted(volumeId, options);
    } catch (error) {
      await this.delete(volumeId).catch(() => undefined);
      throw error;
    }
  }

  /** Make the `data/` root directory inside a fresh image (mounted once, briefly, at the mount point). */
  private async initRoot(image: string, paths: VolumePaths): Promise<void> {
    await mkdir(paths.mountDir, { recursive: true });
    await mustRun('mount', ['-t', 'ext4', '-o', 'loop,nodev,nosuid', image, paths.mountDir], 'mounting the volume');
    try {
      await mkdir(paths.root, { mode: 0o755 });
    } finally {
      await unmountAll(paths.mountDir);
      await detachLoopDevices(paths.dir);
    }
  }

  async ensureMounted(volumeId: string, options: { readOnly?: boolean } = {}): Promise<void> {
    const paths = this.paths(volumeId);
    if ((await mountsUnder(paths.mountDir)).length > 0) {
      // A crash inside `copy` can leave the filesystem frozen; thawing a thawed one fails harmlessly.
      await runCommand('fsfreeze', ['-u', paths.mountDir]);
      return;
    }
    if (!(await fileExists(paths.image))) throw new RuntimeError(`volume ${volumeId} has no storage on this host`);
    await mkdir(paths.mountDir, { recursive: true });
    const flags = options.readOnly === true ? 'loop,ro,nodev,nosuid' : 'loop,nodev,nosuid';
    await mustRun('mount', ['-t', 'ext4', '-o', flags, paths.image, paths.mountDir], 'mounting the volume');
  }

  async usage(volumeId: string): Promise<VolumeUsage> {
    const paths = this.paths(volumeId);
    if ((await mountsUnder(paths.mountDir)).length === 0) throw new RuntimeError(`volume ${volumeId} is not mounted`);
    const fs = await statfs(paths.mountDir);
    return { usedBytes: (fs.blocks - fs.bfree) * fs.bsize, limitBytes: fs.blocks * fs.bsize };
  }

  async grow(volumeId: string, sizeMiB: number): Promise<void> {
    const paths = this.paths(volumeId);
    const bytes = sizeMiB * 1024 * 1024;
    const current = await stat(paths.image);
    if (bytes < current.size) throw new RuntimeError(`volume ${volumeId} cannot shrink`);
    if (bytes === current.size) return;
    await this.ensureMounted(volumeId);
    const handle = await open(paths.image, 'r+');
    try {
      await handle.truncate(bytes);
    } finally {
      await handle.close();
    }
    const [device] = await loopDevicesUnder(paths.dir);
    if (device === undefined) throw new RuntimeError(`volume ${volumeId} has no loop device`);
    await mustRun('losetup', ['-c', device], 'resizing the loop device');
    if ((await runCommand('resize2fs', [device])).exitCode === 0) return;
    // Online growth needs CAP_SYS_RESOURCE, which a server in a container may lack (EPERM): grow it unmounted,
    // which works only while no sandbox holds the mount.
    const unmount = await runCommand('umount', [paths.mountDir]);
    if (unmount.exitCode !== 0) {
      throw new RuntimeError(
        `volume ${volumeId} is in use and this host cannot grow a mounted filesystem`,
        unmount.stderr,
        {
          code: 'volume_in_use',
        },
      );
    }
    try {
      await detachLoopDevices(paths.dir);
      await runCommand('e2fsck', ['-f', '-p', paths.image]);
      await mustRun('resize2fs', [paths.image], 'growing the volume filesystem');
    } finally {
      await this.ensureMounted(volumeId);
    }
  }

  async copy(
    sourceId: string,
    targetId: string,
    options: { readOnly: boolean },
  ): Promise<{ method: 'reflink' | 'sparse-copy' }> {
    const source = this.paths(sourceId);
    const target = this.paths(targetId);
    if (await fileExists(target.image)) {
      await this.ensureMounted(targetId, options);
      return { method: 'sparse-copy' };
    }
    await mkdir(target.dir, { recursive: true });
    await rm(target.partial, { force: true });
    let method: 'reflink' | 'sparse-copy' = 'reflink';
    try {
      await this.ensureMounted(sourceId);
      await mustRun('fsfreeze', ['-f', source.mountDir], 'freezing the volume');
      try {
        crashPoint('volume-copy:frozen');
        const reflink = await runCommand('cp', ['--reflink=always', source.image, target.partial]);
        if (reflink.exitCode !== 0) {
          method = 'sparse-copy';
          await rm(target.partial, { force: true });
          await mustRun('cp', ['--sparse=always', source.image, target.partial], 'copying the volume');
        }
      } finally {
        await runCommand('fsfreeze', ['-u', source.mountDir]);
      }
      await rename(target.partial, target.image);
      await this.ensureMounted(targetId, options);
      return { method };
    } catch (error) {
      await this.delete(targetId).catch(() => undefined);
      throw error;
    }
  }

  async delete(volumeId: string): Promise<void> {
    const paths = this.paths(volumeId);
    if ((await mountsUnder(paths.mountDir)).length > 0) await runCommand('fsfreeze', ['-u', paths.mountDir]);
    await unmountAll(paths.dir);
    await detachLoopDevices(paths.dir);
    await rm(paths.dir, { recursive: true, force: true });
    const left = [
      ...(await mountsUnder(paths.dir)).map((m) => `mount ${m}`),
      ...(await loopDevicesUnder(paths.dir)).map((d) => `loop device ${d}`),
      ...((await fileExists(paths.dir)) ? [`directory ${paths.dir}`] : []),
    ];
    if (left.length > 0) throw new RuntimeError(`volume ${volumeId} left host resources`, left.join('\n'));
  }

  async list(): Promise<string[]> {
    const ids = new Set<string>();
    for (const name of await readdir(this.volumesDir).catch(() => [] as string[])) {
      if (VOLUME_ID.test(name)) ids.add(name);
    }
    const prefix = `${this.volumesDir}/`;
    for (const point of await mountsUnder(this.volumesDir)) {
      const name = point.slice(prefix.length).split('/')[0] ?? '';
      if (VOLUME_ID.test(name)) ids.add(name);
    }
    return [...ids].sort();
  }

  async hostBytes(volumeId: string): Promise<number> {
    const paths = this.paths(volumeId);
    const s = await stat(paths.image).catch(() => null);
    return s === null ? 0 : s.blocks * 512;
  }
}
