import { randomBytes } from 'node:crypto';
import type { Stats } from 'node:fs';
import { constants as fsc } from 'node:fs';
import {
  chmod,
  chown,
  type FileHandle,
  lstat,
  mkdir,
  open,
  readdir,
  readlink,
  rename,
  rmdir,
  stat,
  unlink,
} from 'node:fs/promises';
import type { Readable } from 'node:stream';
import type { FileInfo } from '@burrow/contract';
import { FileReadStream } from './file-read-stream.js';
import { FsError, guard, toFsError } from './fs-errors.js';
import { writeCoalesced } from './write-coalesced.js';

/** Linux `O_PATH` (not exported by node:fs): a handle that names a directory without opening it for reading. */
export const O_PATH = 0o10000000;
/** Flags that open a directory handle by one name without following a symlink there. */
export const DIR_FLAGS = O_PATH | fsc.O_DIRECTORY | fsc.O_NOFOLLOW;
/** Symlink hops allowed in one resolution, as Linux's MAXSYMLINKS. */
const MAX_SYMLINK_HOPS = 40;
/** Longest path component in bytes (NAME_MAX). */
export const NAME_MAX_BYTES = 255;
/** Most entries one `list` call returns. */
export const MAX_LIST_ENTRIES = 50_000;

/**
 * Directory at the sandbox root where {@link SandboxFs.write} stages its temporary files before the rename
 * (hidden; created on first use). A server killed mid-upload leaves its temporary file here, and only here, for
 * {@link SandboxFs.sweepUploadTemp} to remove.
 */
export const UPLOAD_TEMP_DIR = '/.burrow-tmp';
/** Names of {@link SandboxFs.write}'s temporary files: `.<target name>.burrow-<12 hex>`. */
const UPLOAD_TEMP_NAME = /^\..*\.burrow-[0-9a-f]{12}$/s;

/** Whether `name` is the name of one of {@link SandboxFs.write}'s temporary files. */
export function isUploadTempName(name: string): boolean {
  return UPLOAD_TEMP_NAME.test(name);
}

/** A path resolved to a held directory handle plus one final name inside it (`null` = the directory itself). */
export interface Resolved {
  dir: FileHandle;
  name: string | null;
  /** Sandbox path of the resolved target, for messages and FileInfo. */
  path: string;
  /** Handles to close when done (includes `dir`). */
  held: FileHandle[];
}

/**
 * File access beneath a sandbox's host root directory, resolved the way the sandbox's own kernel would
 * (the semantics of Linux `openat2(RESOLVE_IN_ROOT)`): `..` stops at the root, absolute and relative symlinks are
 * re-rooted, and no call ever reaches a host file outside the root.
 *
 * How: every step opens exactly one name relative to a directory handle it holds, as
 * `/proc/self/fd/<handle>/<name>` with `O_NOFOLLOW`, so the host kernel never follows a symlink the sandbox planted
 * and a directory swapped for a symlink mid-call is seen as a symlink (then resolved inside the root), never
 * followed. Symlinks are read and re-resolved by this class; `..` pops its own stack of held handles.
 * Paths are absolute sandbox paths (`/root/a.txt`).
 */
export class SandboxFs {
  /** @param rootDir absolute host path of the sandbox's root filesystem (trusted, chosen by the driver) */
  constructor(readonly rootDir: string) {}

  /** Metadata of `path` (a final symlink is reported, not followed). @throws FsError */
  async stat(path: string): Promise<FileInfo> {
    return this.withResolved(path, { followFinal: false }, async (r) => {
      const st = await statOf(r);
      return infoOf(r.path, st, st.isSymbolicLink() ? await guard(r.path, () => readlink(at(r))) : undefined);
    });
  }

  /**
   * A stream of the file's bytes (symlinks followed inside the root), its size at open; send it to an HTTP response
   * with {@link FileReadStream.sendTo}. The caller consumes or destroys it. @throws FsError
   */
  async openRead(path: string): Promise<{ stream: FileReadStream; sizeBytes: number }> {
    const handle = await this.withResolved(path, { followFinal: true }, async (r) => {
      if (r.name === null) throw new FsError('is_a_directory', `${r.path} is a directory`);
      return guard(r.path, () => open(at(r), fsc.O_RDONLY | fsc.O_NOFOLLOW));
    });
    const st = await handle.stat();
    if (!st.isFile()) {
      await handle.close();
      throw st.isDirectory()
        ? new FsError('is_a_directory', `${path} is a directory; list it instead`)
        : new FsError('invalid_path', `${path} is not a regular file`);
    }
    return { stream: new FileReadStream(handle, st.size), sizeBytes: st.size };
  }

  /**
   * A read-only handle on a regular file (symlinks followed inside the root), for reads at offsets. The caller
   * closes it. @throws FsError
   */
  async openFile(path: string): Promise<FileHandle> {
    const handle = await this.withResolved(path, { followFinal: true }, async (r) => {
      if (r.name === null) throw new FsError('is_a_directory', `${r.path} is a directory`);
      return guard(r.path, () => open(at(r), fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK));
    });
    const st = await handle.stat();
    if (!st.isFile()) {
      await handle.close();
      throw new FsError('invalid_path', `${path} is not a regular file`);
    }
    return handle;
  }

  /**
   * Write `data` to `path` atomically (a temporary file in {@link UPLOAD_TEMP_DIR}, then rename; in the target's
   * own directory when that is on another file system), creating missing parent directories. A final symlink is
   * followed inside the root.
   * @param options.mode permission bits. @default 0o644
   * @throws FsError
   */
  async write(path: string, data: Buffer | Readable, options: { mode?: number } = {}): Promise<FileInfo> {
    const mode = options.mode ?? 0o644;
    return this.withResolved(path, { followFinal: true, createParents: true }, async (r) => {
      if (r.name === null) throw new FsError('is_a_directory', `${r.path} is a directory`);
      const existing = await lstat(at(r)).catch(() => null);
      if (existing?.isDirectory()) throw new FsError('is_a_directory', `${r.path} is a directory`);
      const tmpName = `.upload.burrow-${randomBytes(6).toString('hex')}`;
      let staged = false;
      try {
        return await this.withResolved(
          `${UPLOAD_TEMP_DIR}/${tmpName}`,
          { followFinal: false, createParents: true },
          async (t) => {
            staged = true;
            const [tmpDir, targetDir] = await Promise.all([
              stat(at({ ...t, name: null })),
              stat(at({ ...r, name: null })),
            ]);
            return this.writeVia(r, tmpDir.dev === targetDir.dev ? t.dir : r.dir, tmpName, data, mode);
          },
        );
      } catch (err) {
        // The temporary directory is unusable (the sandbox put something else there): stage next to the target.
        if (staged) throw err;
        return this.writeVia(r, r.dir, tmpName, data, mode);
      }
    });
  }

  /** {@link write}'s body: stage `tmpName` in `stageDir`, then rename it onto `r`. */
  private async writeVia(
    r: Resolved,
    stageDir: FileHandle,
    tmpName: string,
    data: Buffer | Readable,
    mode: number,
  ): Promise<FileInfo> {
    const tmpPath = `/proc/self/fd/${stageDir.fd}/${tmpName}`;
    const fh = await guard(r.path, () =>
      open(tmpPath, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, mode & 0o7777),
    );
    try {
      if (Buffer.isBuffer(data)) await fh.writeFile(data);
      else await writeCoalesced(fh, data);
      await fh.chmod(mode & 0o7777);
      await fh.close();
      await guard(r.path, () => rename(tmpPath, at(r)));
    } catch (err) {
      await fh.close().catch(() => undefined);
      await unlink(tmpPath).catch(() => undefined);
      throw toFsError(r.path, err);
    }
    const st = await statOf(r);
    return infoOf(r.path, st);
  }

  /**
   * Remove temporary files {@link write} left in {@link UPLOAD_TEMP_DIR} (a server killed mid-upload): regular
   * files with its name pattern there, nothing else. Call only while no write to this sandbox is in flight.
   * @returns the names removed
   * @throws FsError when the directory cannot be read
   */
  async sweepUploadTemp(): Promise<string[]> {
    if (!(await this.exists(UPLOAD_TEMP_DIR))) return [];
    return this.withResolved(UPLOAD_TEMP_DIR, { followFinal: true }, async (r) => {
      const dir = r.name === null ? r.dir : await guard(r.path, () => open(at(r), DIR_FLAGS)).catch(() => null);
      // Not a directory (the sandbox put something else there): no write staged anything in it.
      if (dir === null) return [];
      const removed: string[] = [];
      try {
        for (const name of await guard(r.path, () => readdir(`/proc/self/fd/${dir.fd}`))) {
          if (!isUploadTempName(name)) continue;
          const hostPath = `/proc/self/fd/${dir.fd}/${name}`;
          const st = await lstat(hostPath).catch(() => null);
          if (st === null || !st.isFile()) continue;
          await unlink(hostPath).then(
            () => removed.push(name),
            (err: NodeJS.ErrnoException) => {
              if (err.code !== 'ENOENT') throw toFsError(`${r.path}/${name}`, err);
            },
          );
        }
      } finally {
        if (dir !== r.dir) await dir.close();
      }
      return removed;
    });
  }

  /** Entries beneath a directory, `depth` levels deep (1 = direct children), sorted by path. @throws FsError */
  async list(path: string, options: { depth?: number } = {}): Promise<FileInfo[]> {
    const depth = options.depth ?? 1;
    return this.withResolved(path, { followFinal: true }, async (r) => {
      const dir = r.name === null ? r.dir : await guard(r.path, () => open(at(r), DIR_FLAGS));
      const out: FileInfo[] = [];
      try {
        await listInto(dir, r.path, depth, out);
      } finally {
        if (dir !== r.dir) await dir.close();
      }
      return out.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
    });
  }

  /** `mkdir -p`; an existing directory is fine. @throws FsError (`file_exists` if a non-directory is in the way) */
  async mkdir(path: string): Promise<FileInfo> {
    return this.withResolved(path, { followFinal: true, createParents: true }, async (r) => {
      if (r.name !== null) {
        await mkdir(at(r), 0o755).catch((err: NodeJS.ErrnoException) => {
          if (err.code !== 'EEXIST') throw toFsError(r.path, err);
        });
      }
      const st = await statOf(r);
      if (!st.isDirectory()) throw new FsError('file_exists', `${r.path} exists and is not a directory`);
      return infoOf(r.path, st);
    });
  }

  /** Remove a file, symlink (not its target) or, with `recursive`, a directory tree. @throws FsError */
  async remove(path: string, options: { recursive?: boolean } = {}): Promise<void> {
    await this.withResolved(path, { followFinal: false }, async (r) => {
      if (r.name === null) throw new FsError('invalid_path', 'the sandbox root itself cannot be removed');
      const st = await guard(r.path, () => lstat(at(r)));
      if (!st.isDirectory()) return guard(r.path, () => unlink(at(r)));
      if (options.recursive) await removeTree(r.dir, r.name, r.path);
      else await guard(r.path, () => rmdir(at(r)));
    });
  }

  /** Rename `from` to `to`, both inside the root; an existing file at `to` is replaced. @throws FsError */
  async rename(from: string, to: string): Promise<void> {
    await this.withResolved(from, { followFinal: false }, (src) =>
      this.withResolved(to, { followFinal: false }, async (dst) => {
        if (src.name === null || dst.name === null) {
          throw new FsError('invalid_path', 'the sandbox root cannot be renamed or replaced');
        }
        await guard(src.path, () => rename(at(src), at(dst)));
      }),
    );
  }

  /** Whether `path` exists (a dangling final symlink counts: it is reported, not followed). @throws FsError */
  async exists(path: string): Promise<boolean> {
    try {
      await this.stat(path);
      return true;
    } catch (err) {
      if (err instanceof FsError && (err.code === 'file_not_found' || err.code === 'not_a_directory')) return false;
      throw err;
    }
  }

  /**
   * Set the permission bits of `path` (symlinks followed inside the root). The target is pinned by an `O_PATH`
   * handle opened without following, so a swap for a symlink mid-call changes nothing outside.
   * @param mode permission bits, for example 0o755 (setuid, setgid and sticky bits allowed)
   * @throws FsError
   */
  async chmod(path: string, mode: number): Promise<FileInfo> {
    return this.withResolved(path, { followFinal: true }, async (r) => {
      const target = r.name === null ? null : await guard(r.path, () => open(at(r), O_PATH | fsc.O_NOFOLLOW));
      try {
        const fdPath = `/proc/self/fd/${target === null ? r.dir.fd : target.fd}`;
        const st = await guard(r.path, () => (target === null ? stat(fdPath) : target.stat()));
        if (st.isSymbolicLink()) throw new FsError('invalid_path', `${r.path} changed to a symlink meanwhile; retry`);
        await guard(r.path, () => chmod(fdPath, mode & 0o7777));
        return infoOf(r.path, await guard(r.path, () => stat(fdPath)));
      } finally {
        await target?.close();
      }
    });
  }

  /** Numeric owner and group of `path` (a final symlink is reported, not followed). @throws FsError */
  async owner(path: string): Promise<{ uid: number; gid: number }> {
    return this.withResolved(path, { followFinal: false }, async (r) => {
      const st = await statOf(r);
      return { uid: st.uid, gid: st.gid };
    });
  }

  /**
   * Set the owner of `path` (not following a final symlink's target outside the root: symlinks are followed inside
   * the root, as {@link chmod} does). The target is pinned by an `O_PATH` handle opened without following.
   * @param uid numeric user id inside the sandbox
   * @param gid numeric group id inside the sandbox
   * @throws FsError
   */
  async chown(path: string, uid: number, gid: number): Promise<void> {
    await this.withResolved(path, { followFinal: true }, async (r) => {
      const target = r.name === null ? null : await guard(r.path, () => open(at(r), O_PATH | fsc.O_NOFOLLOW));
      try {
        const fdPath = `/proc/self/fd/${target === null ? r.dir.fd : target.fd}`;
        const st = await guard(r.path, () => (target === null ? stat(fdPath) : target.stat()));
        if (st.isSymbolicLink()) throw new FsError('invalid_path', `${r.path} changed to a symlink meanwhile; retry`);
        await guard(r.path, () => chown(fdPath, uid, gid));
      } finally {
        await target?.close();
      }
    });
  }

  /**
   * A held `O_PATH` handle on the directory `path` (symlinks followed inside the root). Host paths below it are
   * formed only as `/proc/self/fd/<fd>/<one name>`. The caller closes it.
   * @throws FsError (`not_a_directory` when `path` is not a directory)
   */
  async openDir(path: string): Promise<{ handle: FileHandle; path: string }> {
    const r = await this.resolve(path, { followFinal: true });
    const keep = r.name === null ? r.dir : await open(at(r), DIR_FLAGS).catch((err) => err as NodeJS.ErrnoException);
    await Promise.all(r.held.filter((h) => h !== keep).map((h) => h.close().catch(() => undefined)));
    if (keep instanceof Error) {
      throw keep.code === 'ENOTDIR' || keep.code === 'ELOOP'
        ? new FsError('not_a_directory', `${r.path} is not a directory`)
        : toFsError(r.path, keep);
    }
    return { handle: keep, path: r.path };
  }

  private async withResolved<T>(
    path: string,
    opts: { followFinal: boolean; createParents?: boolean },
    fn: (r: Resolved) => Promise<T>,
  ): Promise<T> {
    const r = await this.resolve(path, opts);
    try {
      return await fn(r);
    } finally {
      await Promise.all(r.held.map((h) => h.close().catch(() => undefined)));
    }
  }

  /** Walk `path` from the root one name at a time (see the class comment). */
  private async resolve(path: string, opts: { followFinal: boolean; createParents?: boolean }): Promise<Resolved> {
    const queue = checkPath(path);
    const root = await open(this.rootDir, O_PATH | fsc.O_DIRECTORY);
    const stack: { handle: FileHandle; name: string }[] = [{ handle: root, name: '' }];
    const held: FileHandle[] = [root];
    const top = () => stack[stack.length - 1] as { handle: FileHandle; name: string };
    const here = (name: string | null) => {
      const parts = stack.slice(1).map((s) => s.name);
      if (name !== null) parts.push(name);
      return `/${parts.join('/')}`;
    };
    let hops = 0;
    try {
      while (queue.length > 0) {
        const name = queue.shift() as string;
        if (name === '' || name === '.') continue;
        if (name === '..') {
          if (stack.length > 1) stack.pop();
          continue;
        }
        if (stack.length === 1 && name === 'tmp') {
          throw new FsError(
            'invalid_path',
            `/tmp in a sandbox is its private scratch space in memory (so that temporary files that programs keep ` +
              `open survive a pause), not on its disk, so the files API cannot reach ${path}; use a directory on ` +
              'the disk such as /root or /var/tmp, or read and write /tmp with a command (exec)',
          );
        }
        if (stack.length === 1 && VIRTUAL_ROOT_DIRS.has(name)) {
          throw new FsError(
            'invalid_path',
            `/${name} in a sandbox is a virtual filesystem of its kernel, not on its disk, so the files API cannot ` +
              `reach ${path}; read or write it with a command (exec), e.g. cat /${name}/...`,
          );
        }
        const last = queue.every((c) => c === '' || c === '.');
        if (last && !opts.followFinal) return { dir: top().handle, name, path: here(name), held };
        const childPath = `/proc/self/fd/${top().handle.fd}/${name}`;
        let child: FileHandle;
        try {
          child = await open(childPath, DIR_FLAGS);
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code;
          if (code === 'ENOENT' && !last && opts.createParents) {
            await mkdir(childPath, 0o755).catch((e: NodeJS.ErrnoException) => {
              if (e.code !== 'EEXIST') throw e;
            });
            queue.unshift(name);
            continue;
          }
          if (code === 'ENOENT') {
            if (last) return { dir: top().handle, name, path: here(name), held };
            throw new FsError('file_not_found', `${here(name)} does not exist`);
          }
          if (code !== 'ENOTDIR' && code !== 'ELOOP') throw err;
          const st = await lstat(childPath);
          if (!st.isSymbolicLink()) {
            if (last) return { dir: top().handle, name, path: here(name), held };
            throw new FsError('not_a_directory', `${here(name)} is not a directory`);
          }
          if (++hops > MAX_SYMLINK_HOPS) throw new FsError('invalid_path', `too many levels of symlinks in ${path}`);
          const target = await readlink(childPath);
          if (target.startsWith('/')) stack.length = 1;
          queue.unshift(...target.split('/'));
          continue;
        }
        held.push(child);
        stack.push({ handle: child, name });
      }
      // The path named a directory (the root, or one reached through `..` or a symlink): address it by itself.
      const dirPath = here(null);
      return { dir: top().handle, name: null, path: dirPath, held };
    } catch (err) {
      await Promise.all(held.map((h) => h.close().catch(() => undefined)));
      throw toFsError(path, err);
    }
  }
}

/** Metadata of the resolved target; a directory addressed by its own handle is stat-ed through its magic link. */
export function statOf(r: Resolved): Promise<Stats> {
  return guard(r.path, () => (r.name === null ? stat(at(r)) : lstat(at(r))));
}

/** The host path that names `r` through its held directory handle. */
export function at(r: Resolved): string {
  return r.name === null ? `/proc/self/fd/${r.dir.fd}` : `/proc/self/fd/${r.dir.fd}/${r.name}`;
}

/**
 * Top-level directories that gVisor serves from its own kernel inside a sandbox (procfs, sysfs, its /dev tmpfs):
 * what the host's copy of the root holds there is never what the sandbox sees, so files calls refuse them, and
 * `/tmp` likewise (the sandbox's own tmpfs, docs/adr/0005).
 */
const VIRTUAL_ROOT_DIRS: ReadonlySet<string> = new Set(['proc', 'sys', 'dev']);

/** Split and check an absolute sandbox path. @throws FsError invalid_path */
function checkPath(path: string): string[] {
  if (typeof path !== 'string' || !path.startsWith('/')) {
    throw new FsError('invalid_path', `paths are absolute inside the sandbox; got ${JSON.stringify(path)}`);
  }
  if (path.includes('\0')) throw new FsError('invalid_path', 'paths may not contain NUL bytes');
  if (Buffer.byteLength(path) > 4096) throw new FsError('invalid_path', 'path longer than 4096 bytes');
  const parts = path.split('/');
  for (const p of parts) {
    if (Buffer.byteLength(p) > NAME_MAX_BYTES)
      throw new FsError('invalid_path', `path component longer than 255 bytes`);
  }
  return parts;
}

async function listInto(dir: FileHandle, dirPath: string, depth: number, out: FileInfo[]): Promise<void> {
  const names = await guard(dirPath, () => readdir(`/proc/self/fd/${dir.fd}`));
  for (const name of names) {
    if (out.length >= MAX_LIST_ENTRIES) {
      throw new FsError('invalid_request', `more than ${MAX_LIST_ENTRIES} entries; list with a smaller depth`);
    }
    const childPath = dirPath === '/' ? `/${name}` : `${dirPath}/${name}`;
    const hostPath = `/proc/self/fd/${dir.fd}/${name}`;
    const st = await lstat(hostPath).catch(() => null);
    if (st === null) continue; // removed meanwhile
    out.push(infoOf(childPath, st, st.isSymbolicLink() ? await readlink(hostPath).catch(() => '') : undefined));
    if (depth > 1 && st.isDirectory()) {
      const child = await open(hostPath, DIR_FLAGS).catch(() => null);
      if (child === null) continue; // swapped for something else meanwhile
      try {
        await listInto(child, childPath, depth - 1, out);
      } finally {
        await child.close();
      }
    }
  }
}

/** Remove `name` (a directory) under `parent` and everything in it, one held handle at a time. */
async function removeTree(parent: FileHandle, name: string, path: string): Promise<void> {
  const dirHostPath = `/proc/self/fd/${parent.fd}/${name}`;
  const dir = await guard(path, () => open(dirHostPath, DIR_FLAGS)).catch(async (err: FsError) => {
    if (err.code === 'not_a_directory' || err.code === 'invalid_path') {
      // Swapped for a file or symlink meanwhile: remove that entry itself, never what it points to.
      await guard(path, () => unlink(dirHostPath));
      return null;
    }
    throw err;
  });
  if (dir === null) return;
  try {
    for (const child of await readdir(`/proc/self/fd/${dir.fd}`)) {
      const childHostPath = `/proc/self/fd/${dir.fd}/${child}`;
      const st = await lstat(childHostPath).catch(() => null);
      if (st === null) continue;
      if (st.isDirectory()) await removeTree(dir, child, `${path}/${child}`);
      else
        await unlink(childHostPath).catch((err: NodeJS.ErrnoException) => {
          if (err.code !== 'ENOENT') throw toFsError(`${path}/${child}`, err);
        });
    }
  } finally {
    await dir.close();
  }
  await guard(path, () => rmdir(dirHostPath));
}

export function infoOf(path: string, st: Stats, symlinkTarget?: string): FileInfo {
  const type = st.isFile() ? 'file' : st.isDirectory() ? 'directory' : st.isSymbolicLink() ? 'symlink' : 'other';
  const name = path === '/' ? '/' : (path.split('/').pop() ?? '');
  const info: FileInfo = {
    path,
    name,
    type,
    sizeBytes: st.size,
    mode: st.mode & 0o7777,
    modifiedAt: st.mtime.toISOString(),
  };
  if (symlinkTarget !== undefined) info.symlinkTarget = symlinkTarget;
  return info;
}
