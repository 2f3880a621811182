import { type FSWatcher, watch } from 'node:fs';
import { type FileHandle, lstat, open, readdir, stat } from 'node:fs/promises';
import type { FileWatchEvent } from '@burrow/contract';
import { DIR_FLAGS, type SandboxFs } from './sandbox-fs.js';

/** Options of {@link watchDirectory}. */
export interface WatchDirectoryOptions {
  /** Watch subdirectories, including ones created later. @default false */
  recursive?: boolean;
  /** Most directories watched at once (one inotify watch and one handle each); more are left unwatched. @default 4096 */
  maxDirectories?: number;
  /** How long a vanished name waits for its new name before it is reported deleted, in ms. @default 50 */
  renameWindowMs?: number;
  /** How often the watched directory is checked for removal, in ms. @default 1000 */
  selfCheckMs?: number;
}

/** A running watch; {@link close} stops it and frees its handles. */
export interface DirectoryWatch {
  /** Sandbox path of the watched directory, as resolved. */
  readonly path: string;
  close(): Promise<void>;
}

interface Known {
  ino: number;
  isDirectory: boolean;
}

interface WatchedDir {
  path: string;
  handle: FileHandle;
  watcher: FSWatcher;
  names: Map<string, Known>;
}

/**
 * Directories watched by all watches of this process together. Each holds a handle: six recursive watches of a
 * tree of 3,700 directories exhausted the server's 20,000 file descriptors, and every other request then failed.
 * Past `max`, subdirectories are left unwatched, as past a watch's own `maxDirectories` (its top directory is
 * always watched). `used` is maintained by the watches; tests may lower `max`.
 */
export const WATCH_BUDGET = { max: 8192, used: 0 };

/**
 * Watch the directory `path` of a sandbox for create, modify, delete and rename events (inotify on the host side;
 * under runsc `--file-access=shared` the sandbox's own writes reach the host file system and are seen).
 *
 * Containment: the directory is resolved by {@link SandboxFs} and watched through its held `O_PATH` handle
 * (`/proc/self/fd/<fd>`), and each subdirectory is opened by one name with `O_NOFOLLOW` before it is watched, so a
 * directory swapped for a symlink is never followed: no host directory outside the root is ever watched.
 * A rename is reported as `rename` when both names are in the watched tree (paired by inode), otherwise as `delete`
 * or `create`. A name created and removed before its event is handled is not reported.
 * @param onEvent receives every event, in order, starting with `ready`, ending with `end` if the directory goes away
 * @throws FsError resolving `path`
 */
export async function watchDirectory(
  fs: SandboxFs,
  path: string,
  onEvent: (event: FileWatchEvent) => void,
  options: WatchDirectoryOptions = {},
): Promise<DirectoryWatch> {
  const root = await fs.openDir(path);
  const recursive = options.recursive === true;
  const maxDirectories = options.maxDirectories ?? 4096;
  const renameWindowMs = options.renameWindowMs ?? 50;
  const selfCheckMs = options.selfCheckMs ?? 1000;
  const dirs = new Map<string, WatchedDir>();
  const pendingDeletes = new Map<number, { path: string; isDirectory: boolean; timer: NodeJS.Timeout }>();
  let closed = false;
  let chain: Promise<void> = Promise.resolve();
  const emit = (event: FileWatchEvent) => {
    if (!closed) onEvent(event);
  };
  const join = (dir: string, name: string) => (dir === '/' ? `/${name}` : `${dir}/${name}`);

  const closeUnder = async (prefix: string) => {
    for (const [p, d] of dirs) {
      if (p === prefix || p.startsWith(`${prefix}/`)) {
        dirs.delete(p);
        WATCH_BUDGET.used--;
        d.watcher.close();
        await d.handle.close().catch(() => undefined);
      }
    }
  };

  const addDir = async (handle: FileHandle, dirPath: string, announce: boolean): Promise<void> => {
    const overBudget = dirs.size > 0 && WATCH_BUDGET.used >= WATCH_BUDGET.max;
    if (closed || dirs.has(dirPath) || dirs.size >= maxDirectories || overBudget) {
      await handle.close().catch(() => undefined);
      return;
    }
    const d: WatchedDir = { path: dirPath, handle, names: new Map(), watcher: undefined as unknown as FSWatcher };
    try {
      d.watcher = watch(`/proc/self/fd/${handle.fd}`, { persistent: false }, (type, filename) => {
        if (typeof filename !== 'string' || filename === '') return;
        chain = chain.then(() => onRaw(d, type, filename)).catch(() => undefined);
      });
    } catch {
      await handle.close().catch(() => undefined);
      return;
    }
    d.watcher.on('error', () => undefined);
    dirs.set(dirPath, d);
    WATCH_BUDGET.used++;
    const names = await readdir(`/proc/self/fd/${handle.fd}`).catch(() => [] as string[]);
    for (const name of names) {
      const st = await lstat(`/proc/self/fd/${handle.fd}/${name}`).catch(() => null);
      if (st === null) continue;
      d.names.set(name, { ino: st.ino, isDirectory: st.isDirectory() });
      if (announce) emit({ type: 'create', path: join(dirPath, name), isDirectory: st.isDirectory() });
      if (recursive && st.isDirectory()) await addChild(d, name, announce);
    }
  };

  const addChild = async (parent: WatchedDir, name: string, announce: boolean) => {
    const child = await open(`/proc/self/fd/${parent.handle.fd}/${name}`, DIR_FLAGS).catch(() => null);
    if (child !== null) await addDir(child, join(parent.path, name), announce);
  };

  const onRaw = async (d: WatchedDir, type: string, name: string): Promise<void> => {
    if (closed || dirs.get(d.path) !== d) return;
    const childPath = join(d.path, name);
    const st = await lstat(`/proc/self/fd/${d.handle.fd}/${name}`).catch(() => null);
    const prev = d.names.get(name);
    if (st !== null) {
      const isDirectory = st.isDirectory();
      if (prev !== undefined && prev.ino === st.ino) {
        if (type === 'change') emit({ type: 'modify', path: childPath, isDirectory });
        return;
      }
      d.names.set(name, { ino: st.ino, isDirectory });
      const pending = pendingDeletes.get(st.ino);
      if (pending !== undefined) {
        clearTimeout(pending.timer);
        pendingDeletes.delete(st.ino);
        emit({ type: 'rename', path: childPath, oldPath: pending.path, isDirectory });
        if (pending.isDirectory) await closeUnder(pending.path);
        if (recursive && isDirectory) await addChild(d, name, false);
        return;
      }
      emit({ type: 'create', path: childPath, isDirectory });
      if (recursive && isDirectory) await addChild(d, name, true);
      return;
    }
    if (prev === undefined) return; // created and removed before its event was handled
    d.names.delete(name);
    const timer = setTimeout(() => {
      pendingDeletes.delete(prev.ino);
      emit({ type: 'delete', path: childPath, isDirectory: prev.isDirectory });
      if (prev.isDirectory) void closeUnder(childPath);
    }, renameWindowMs);
    pendingDeletes.set(prev.ino, { path: childPath, isDirectory: prev.isDirectory, timer });
  };

  // inotify tells nothing through node when the watched directory itself is removed: check its link count.
  const selfCheck = setInterval(() => {
    chain = chain
      .then(async () => {
        const self = await stat(`/proc/self/fd/${root.handle.fd}`).catch(() => null);
        if (!closed && (self === null || self.nlink === 0)) {
          emit({ type: 'end', reason: `${root.path} was removed` });
          await close();
        }
      })
      .catch(() => undefined);
  }, selfCheckMs);
  selfCheck.unref();

  const close = async () => {
    if (closed) return;
    closed = true;
    clearInterval(selfCheck);
    for (const p of pendingDeletes.values()) clearTimeout(p.timer);
    pendingDeletes.clear();
    const all = [...dirs.values()];
    dirs.clear();
    WATCH_BUDGET.used -= all.length;
    for (const d of all) d.watcher.close();
    await Promise.all(all.map((d) => d.handle.close().catch(() => undefined)));
  };

  await addDir(root.handle, root.path, false);
  emit({ type: 'ready', path: root.path });
  return { path: root.path, close };
}
