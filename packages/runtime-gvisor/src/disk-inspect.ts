import { lstat, mkdir, readdir, rmdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { DiskChange, DiskInspection, InspectDiskOptions } from '@burrow/runtime';
import { RuntimeError, UPLOAD_TEMP_DIR } from '@burrow/runtime';
import { AGENT_GUEST_DIR } from './agent-binary.js';
import { mountsUnder, mustRun, unmountAll } from './host-plumbing.js';

/**
 * Top-level entries that are Burrow's, not the sandbox's: the exec agent's mount point and the upload staging
 * directory. Their bytes count as used; they are never listed as changes.
 */
const INTERNAL_PATHS: ReadonlySet<string> = new Set([AGENT_GUEST_DIR, UPLOAD_TEMP_DIR]);

/** Most entries of the writable layer one inspection walks; past this the result is `truncated`. */
const MAX_ENTRIES_WALKED = 1_000_000;

/** Host paths {@link inspectSandboxDisk} needs (a subset of the driver's `SandboxPaths`). */
export interface InspectPaths {
  /** The sandbox's directory. */
  dir: string;
  /** The ext4 image. */
  image: string;
  /** Where the image is mounted while the sandbox runs. */
  diskDir: string;
}

/** Name of the read-only mount point of an inspection under the sandbox's directory. */
export const INSPECT_MOUNT_NAME = 'inspect';

/**
 * Inspect a sandbox's writable layer. A running sandbox's mounted disk is read in place; a paused or stopped one's
 * image is mounted read-only (`ro,noload`: no journal replay, the loop device itself read-only) under
 * `<dir>/inspect` and unmounted after, so its bytes (and a pause image's disk checksum) stay unchanged.
 * @throws RuntimeError when the sandbox has no disk image
 */
export async function inspectSandboxDisk(
  paths: InspectPaths,
  options: InspectDiskOptions & { limitBytes: number },
): Promise<DiskInspection> {
  if ((await mountsUnder(paths.diskDir)).length > 0) {
    return inspectOverlayUpper(join(paths.diskDir, 'upper'), options.template.rootfsDir, options);
  }
  const image = await stat(paths.image).catch(() => null);
  if (image === null) throw new RuntimeError(`sandbox disk ${paths.image} is missing`);
  const mountDir = join(paths.dir, INSPECT_MOUNT_NAME);
  await releaseInspectMount(paths.dir);
  await mkdir(mountDir, { recursive: true });
  try {
    await mustRun(
      'mount',
      ['-t', 'ext4', '-o', 'loop,ro,noload,nodev,nosuid,noexec', paths.image, mountDir],
      'mounting the disk read-only',
    );
    return await inspectOverlayUpper(join(mountDir, 'upper'), options.template.rootfsDir, options);
  } finally {
    await releaseInspectMount(paths.dir);
  }
}

/** Unmount and remove an inspection mount a crash may have left under `sandboxDir`. Idempotent. */
export async function releaseInspectMount(sandboxDir: string): Promise<void> {
  const mountDir = join(sandboxDir, INSPECT_MOUNT_NAME);
  await unmountAll(mountDir);
  await rmdir(mountDir).catch(() => undefined);
}

/**
 * Changes and usage of an overlay's upper dir against its lower dir: a 0/0 character device is a whiteout
 * (deleted), an entry present in the lower dir is modified (a directory there is only descended into), anything
 * else is added. Opaque directories (a template directory deleted and made again) show as their new contents.
 */
export async function inspectOverlayUpper(
  upperDir: string,
  lowerDir: string,
  options: InspectDiskOptions & { limitBytes: number },
): Promise<DiskInspection> {
  const changes: DiskChange[] = [];
  const counts = { added: 0, modified: 0, deleted: 0 };
  const dirBytes = new Map<string, number>();
  let walked = 0;
  let truncated = false;
  let usedBytes = 0;

  const record = (change: DiskChange): void => {
    if (INTERNAL_PATHS.has(`/${change.path.split('/')[1] ?? ''}`)) return;
    counts[change.kind] += 1;
    if (changes.length < options.maxChanges) changes.push(change);
    else truncated = true;
  };
  const charge = (sandboxPath: string, bytes: number): void => {
    usedBytes += bytes;
    const parts = sandboxPath.split('/').filter(Boolean);
    for (let depth = 1; depth <= Math.min(options.maxDepth, parts.length - 1); depth += 1) {
      const dir = `/${parts.slice(0, depth).join('/')}`;
      dirBytes.set(dir, (dirBytes.get(dir) ?? 0) + bytes);
    }
  };

  const walk = async (relative: string, lowerIsDir: boolean): Promise<void> => {
    const entries = await readdir(join(upperDir, relative), { withFileTypes: true }).catch(() => []);
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const entry of entries) {
      if (walked >= MAX_ENTRIES_WALKED) {
        truncated = true;
        return;
      }
      walked += 1;
      const rel = relative === '' ? entry.name : `${relative}/${entry.name}`;
      const sandboxPath = `/${rel}`;
      const st = await lstat(join(upperDir, rel)).catch(() => null);
      if (st === null) continue;
      const lower = lowerIsDir ? await lstat(join(lowerDir, rel)).catch(() => null) : null;
      const bytes = st.blocks * 512;
      charge(sandboxPath, bytes);
      if (st.isCharacterDevice() && st.rdev === 0) {
        record({ path: sandboxPath, kind: 'deleted', type: typeOf(lower), sizeBytes: 0 });
        continue;
      }
      if (st.isDirectory()) {
        if (lower === null || !lower.isDirectory()) {
          record({
            path: sandboxPath,
            kind: lower === null ? 'added' : 'modified',
            type: 'directory',
            sizeBytes: bytes,
          });
        }
        await walk(rel, lower?.isDirectory() === true);
        continue;
      }
      record({ path: sandboxPath, kind: lower === null ? 'added' : 'modified', type: typeOf(st), sizeBytes: bytes });
    }
  };
  const root = await stat(upperDir).catch(() => null);
  if (root?.isDirectory()) await walk('', true);
  const directories = [...dirBytes.entries()]
    .map(([path, bytes]) => ({ path, bytes }))
    .sort((a, b) => b.bytes - a.bytes || (a.path < b.path ? -1 : 1))
    .slice(0, options.maxDirectories);
  return { usedBytes, limitBytes: options.limitBytes, directories, changes, counts, truncated };
}

function typeOf(
  st: { isFile(): boolean; isDirectory(): boolean; isSymbolicLink(): boolean } | null,
): DiskChange['type'] {
  if (st === null) return 'other';
  if (st.isFile()) return 'file';
  if (st.isDirectory()) return 'directory';
  if (st.isSymbolicLink()) return 'symlink';
  return 'other';
}
