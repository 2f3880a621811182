import { once } from 'node:events';
import {
  closeSync,
  fchmodSync,
  constants as fsc,
  fstatSync,
  futimesSync,
  openSync,
  readFileSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { chmod, type FileHandle, link, lstat, mkdir, open, symlink, unlink } from 'node:fs/promises';
import { posix } from 'node:path';
import type { ArchiveEntryIssue, ArchiveUploadResult } from '@burrow/contract';
import { Parser, type ReadEntry } from 'tar';
import { FsError, toFsError } from './fs-errors.js';
import { DIR_FLAGS, NAME_MAX_BYTES, type SandboxFs } from './sandbox-fs.js';
import { writeCoalesced } from './write-coalesced.js';

/** Most issues listed in one {@link ArchiveUploadResult} (the count covers all). */
export const MAX_LISTED_ISSUES = 1000;
/** Files up to this size are read or written whole with blocking calls (see {@link writeSmallFile}): 256 KiB. */
export const SMALL_FILE_BYTES = 256 * 1024;
/** Directory handles kept open while extracting one archive. */
const MAX_CACHED_DIRS = 512;

/**
 * Extract a tar (gzip detected by its magic bytes) into the directory `targetPath` of a sandbox, entry by entry,
 * streaming: no entry is held in memory.
 *
 * Containment is by construction: `targetPath` is resolved by {@link SandboxFs} (inside the root), then every entry is
 * created through held directory handles below it, one name at a time with `O_NOFOLLOW`: an entry never passes
 * through a symlink, so nothing is written outside `targetPath` even when earlier entries or code in the sandbox
 * planted symlinks. Entries with `..`, symlinks whose target is absolute or climbs out of `targetPath`, hard links to
 * names outside the archive, device nodes and FIFOs are skipped; absolute names are made relative and setuid, setgid
 * and sticky bits cleared (neutralised). The result lists each.
 * @throws FsError (`no_space` when the disk fills; `invalid_request` for a malformed archive; errors resolving
 * `targetPath`)
 */
export async function extractArchive(
  fs: SandboxFs,
  targetPath: string,
  body: AsyncIterable<Buffer | Uint8Array>,
): Promise<ArchiveUploadResult> {
  await fs.mkdir(targetPath);
  const target = await fs.openDir(targetPath);
  const dirs = new DirCache(target.handle);
  const result: ArchiveUploadResult = {
    path: target.path,
    files: 0,
    directories: 0,
    symlinks: 0,
    hardLinks: 0,
    bytes: 0,
    issues: [],
    issueCount: 0,
  };
  const issue = (path: string, action: ArchiveEntryIssue['action'], reason: string) => {
    result.issueCount++;
    if (result.issues.length < MAX_LISTED_ISSUES) result.issues.push({ path, action, reason });
  };
  const parser = new Parser({ strict: true });
  const entries = new EntryQueue(parser);
  const feeding = (async () => {
    for await (const chunk of body) {
      if (entries.failed) return;
      if (!parser.write(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength))) {
        await Promise.race([once(parser, 'drain'), entries.done]);
      }
    }
    parser.end();
  })().catch((err: unknown) => entries.fail(err));
  try {
    for (let entry = await entries.next(); entry !== null; entry = await entries.next()) {
      await extractEntry(dirs, entry, result, issue).finally(() => entry.resume());
    }
    await feeding;
    if (entries.error !== undefined) throw entries.error;
    return result;
  } catch (err) {
    entries.fail(err);
    // Let the feeder stop reading the body before answering.
    await feeding;
    const code = (err as { code?: string }).code;
    // TAR_*: node-tar's parse errors; Z_*: its gunzip of a body that starts with gzip's magic but is not gzip.
    if (typeof code === 'string' && (code.startsWith('TAR_') || code.startsWith('Z_'))) {
      throw new FsError('invalid_request', `not a valid tar archive: ${(err as Error).message}`, { cause: err });
    }
    throw toFsError(target.path, err);
  } finally {
    await dirs.close();
  }
}

async function extractEntry(
  dirs: DirCache,
  entry: ReadEntry,
  result: ArchiveUploadResult,
  issue: (path: string, action: ArchiveEntryIssue['action'], reason: string) => void,
): Promise<void> {
  const raw = entry.path;
  const parts = entryParts(raw);
  if (typeof parts === 'string') return issue(raw, 'skipped', parts);
  if (raw.startsWith('/')) issue(raw, 'neutralised', 'absolute name made relative to the target directory');
  const mode = entry.mode ?? 0o644;
  if ((mode & 0o7000) !== 0 && entry.type !== 'SymbolicLink') {
    issue(raw, 'neutralised', 'setuid, setgid and sticky bits cleared');
  }
  const perm = mode & 0o777;
  if (entry.type === 'Directory') {
    if (parts.length === 0) return; // the archive's own top directory (`./`)
    const dir = await dirs.dirFor(parts, true);
    if (typeof dir === 'string') return issue(raw, 'skipped', dir);
    await dirs.chmodDir(dir, perm);
    result.directories++;
    return;
  }
  if (parts.length === 0) return issue(raw, 'skipped', 'empty name');
  const name = parts[parts.length - 1] as string;
  const parent = await dirs.dirFor(parts.slice(0, -1), true);
  if (typeof parent === 'string') return issue(raw, 'skipped', parent);
  const hostPath = `/proc/self/fd/${parent.fd}/${name}`;
  switch (entry.type) {
    case 'File':
    case 'OldFile':
    case 'ContiguousFile': {
      const written =
        entry.size <= SMALL_FILE_BYTES
          ? writeSmallFile(hostPath, Buffer.concat(await collect(entry)), perm, entry.mtime)
          : await writeLargeFile(hostPath, entry, perm);
      if (typeof written === 'string') return issue(raw, 'skipped', written);
      result.bytes += written;
      result.files++;
      return;
    }
    case 'SymbolicLink': {
      const target = entry.linkpath ?? '';
      if (target === '' || target.includes('\0')) return issue(raw, 'skipped', 'empty symlink target');
      if (target.startsWith('/')) return issue(raw, 'skipped', `symlink target ${target} is absolute`);
      const resolved = posix.normalize(posix.join(...parts.slice(0, -1), target));
      if (resolved === '..' || resolved.startsWith('../')) {
        return issue(raw, 'skipped', `symlink target ${target} points outside the target directory`);
      }
      await removeNonDirectory(hostPath);
      await symlink(target, hostPath);
      result.symlinks++;
      return;
    }
    case 'Link': {
      const linkParts = entryParts(entry.linkpath ?? '');
      if (typeof linkParts === 'string' || linkParts.length === 0) {
        return issue(raw, 'skipped', `hard link target ${entry.linkpath ?? ''} is outside the archive`);
      }
      const srcDir = await dirs.dirFor(linkParts.slice(0, -1), false);
      if (typeof srcDir === 'string') return issue(raw, 'skipped', `hard link target ${entry.linkpath} not found`);
      const srcPath = `/proc/self/fd/${srcDir.fd}/${linkParts[linkParts.length - 1]}`;
      const st = await lstat(srcPath).catch(() => null);
      if (st === null || !st.isFile()) {
        return issue(raw, 'skipped', `hard link target ${entry.linkpath} is not a regular file in the archive`);
      }
      await removeNonDirectory(hostPath);
      // linkat without AT_SYMLINK_FOLLOW: the source's final name is never followed.
      await link(srcPath, hostPath);
      result.hardLinks++;
      return;
    }
    case 'CharacterDevice':
    case 'BlockDevice':
      return issue(raw, 'skipped', 'device nodes are not extracted');
    case 'FIFO':
      return issue(raw, 'skipped', 'FIFOs are not extracted');
    default:
      return issue(raw, 'skipped', `unsupported entry type ${entry.type}`);
  }
}

/** Why an existing name stops a file from being written there, from `open`'s error; other errors are rethrown. */
function inTheWay(err: unknown): string {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ELOOP') return 'a symlink of that name is in the way';
  if (code === 'EISDIR') return 'a directory of that name is in the way';
  throw err;
}

const CREATE_FLAGS = fsc.O_WRONLY | fsc.O_CREAT | fsc.O_TRUNC | fsc.O_NOFOLLOW | fsc.O_NONBLOCK;
/** Creates a new file only: never opens an existing name (with `O_EXCL` not even a symlink's target is touched). */
const CREATE_NEW_FLAGS = fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW;

/**
 * A small file, written with blocking calls: a few system calls in a row cost far less than trips through libuv's
 * thread pool, which dominated a tree of 10,000 small files (measured: docs/files.md). The body is already in memory.
 * A new name is created with `O_EXCL` (then it is surely a regular file and has `perm` less the umask, so the `fstat`
 * and, when the umask keeps every bit, the `fchmod` are skipped: four calls instead of six); an existing one is
 * opened without following and checked.
 * @returns the bytes written, or why the entry was skipped
 */
function writeSmallFile(hostPath: string, data: Buffer, perm: number, mtime: Date | undefined): number | string {
  let fd: number;
  let fresh = true;
  try {
    fd = openSync(hostPath, CREATE_NEW_FLAGS, perm);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') return inTheWay(err);
    fresh = false;
    try {
      fd = openSync(hostPath, CREATE_FLAGS, perm);
    } catch (err2) {
      return inTheWay(err2);
    }
  }
  try {
    if (!fresh && !fstatSync(fd).isFile()) return 'something other than a regular file is in the way';
    try {
      for (let off = 0; off < data.length; ) off += writeSync(fd, data, off);
    } catch (err) {
      removePartial(hostPath);
      throw err;
    }
    if (!fresh || (perm & processUmask()) !== 0) fchmodSync(fd, perm);
    if (mtime !== undefined) futimesSync(fd, mtime, mtime);
    return data.length;
  } finally {
    closeSync(fd);
  }
}

let umaskBits: number | undefined;
/** The process umask, read once from /proc (`process.umask()` without an argument is deprecated); 0o7777 if unknown. */
function processUmask(): number {
  if (umaskBits === undefined) {
    const line = /^Umask:\s*([0-7]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'));
    umaskBits = line === null ? 0o7777 : Number.parseInt(line[1] as string, 8);
  }
  return umaskBits;
}

/** A file streamed to disk as its entry is read. @returns the bytes written, or why the entry was skipped */
async function writeLargeFile(hostPath: string, entry: ReadEntry, perm: number): Promise<number | string> {
  let fh: FileHandle;
  try {
    fh = await open(hostPath, CREATE_FLAGS, perm);
  } catch (err) {
    return inTheWay(err);
  }
  try {
    if (!(await fh.stat()).isFile()) return 'something other than a regular file is in the way';
    let bytes: number;
    try {
      bytes = await writeCoalesced(fh, entry);
    } catch (err) {
      removePartial(hostPath);
      throw err;
    }
    await fh.chmod(perm);
    if (entry.mtime !== undefined) await fh.utimes(entry.mtime, entry.mtime);
    return bytes;
  } finally {
    await fh.close();
  }
}

/**
 * Removes the name of a file whose contents could not be written (ENOSPC, EDQUOT, EIO…): a partial file would keep
 * the disk full and look like a good one. Only the name in the held parent is unlinked; nothing is followed.
 */
function removePartial(hostPath: string): void {
  try {
    unlinkSync(hostPath);
  } catch {
    // already gone, or replaced by a directory from inside the sandbox: nothing of ours to remove
  }
}

async function collect(source: AsyncIterable<Buffer>): Promise<Buffer[]> {
  const parts: Buffer[] = [];
  for await (const chunk of source) parts.push(chunk);
  return parts;
}

/** The components of an entry name below the target, or why it is refused. */
function entryParts(name: string): string[] | string {
  if (name.includes('\0')) return 'name contains a NUL byte';
  const parts = name.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) return 'name contains .. (would climb out of the target directory)';
  if (parts.some((p) => Buffer.byteLength(p) > NAME_MAX_BYTES)) return 'a name component is longer than 255 bytes';
  return parts;
}

async function removeNonDirectory(hostPath: string): Promise<void> {
  const st = await lstat(hostPath).catch(() => null);
  if (st === null) return;
  if (st.isDirectory()) throw new FsError('file_exists', 'a directory is in the way');
  await unlink(hostPath);
}

/** Directory handles below the extraction target, opened one name at a time and never through a symlink. */
class DirCache {
  private readonly dirs = new Map<string, FileHandle>();
  constructor(private readonly root: FileHandle) {}

  /** The handle of the directory `parts` below the target (created when `create`), or why there is none. */
  async dirFor(parts: string[], create: boolean): Promise<FileHandle | string> {
    let dir = this.root;
    for (let i = 0; i < parts.length; i++) {
      const key = parts.slice(0, i + 1).join('/');
      const cached = this.dirs.get(key);
      if (cached !== undefined) {
        dir = cached;
        continue;
      }
      const hostPath = `/proc/self/fd/${dir.fd}/${parts[i]}`;
      let child: FileHandle;
      try {
        child = await open(hostPath, DIR_FLAGS);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'ENOENT' && create) {
          await mkdir(hostPath, 0o755).catch((e: NodeJS.ErrnoException) => {
            if (e.code !== 'EEXIST') throw e;
          });
          i--;
          continue;
        }
        if (code === 'ENOENT') return `${key} does not exist`;
        if (code === 'ENOTDIR' || code === 'ELOOP') return `${key} is a symlink or not a directory; not followed`;
        throw err;
      }
      if (this.dirs.size >= MAX_CACHED_DIRS) await this.evict();
      this.dirs.set(key, child);
      dir = child;
    }
    return dir;
  }

  async chmodDir(dir: FileHandle, mode: number): Promise<void> {
    await chmod(`/proc/self/fd/${dir.fd}`, mode | 0o700);
  }

  private async evict(): Promise<void> {
    const all = [...this.dirs.values()];
    this.dirs.clear();
    await Promise.all(all.map((h) => h.close().catch(() => undefined)));
  }

  async close(): Promise<void> {
    await this.evict();
    await this.root.close().catch(() => undefined);
  }
}

/** Hands the parser's entries to one consumer in order; records the first failure. */
class EntryQueue {
  private readonly queue: ReadEntry[] = [];
  private ended = false;
  error: unknown;
  failed = false;
  private wake: (() => void) | undefined;
  private resolveDone!: () => void;
  /** Settles once the archive ended or failed. */
  readonly done = new Promise<void>((resolve) => {
    this.resolveDone = resolve;
  });

  constructor(private readonly parser: Parser) {
    parser.on('entry', (entry: ReadEntry) => {
      this.queue.push(entry);
      this.poke();
    });
    parser.on('end', () => {
      this.ended = true;
      this.resolveDone();
      this.poke();
    });
    parser.on('error', (err: unknown) => this.fail(err));
  }

  fail(err: unknown): void {
    if (this.failed) return;
    this.failed = true;
    this.error = err;
    this.ended = true;
    this.parser.abort(err instanceof Error ? err : new Error(String(err)));
    this.resolveDone();
    this.poke();
  }

  private poke(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }

  async next(): Promise<ReadEntry | null> {
    for (;;) {
      if (this.failed) throw this.error;
      const entry = this.queue.shift();
      if (entry !== undefined) return entry;
      if (this.ended) return null;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
    }
  }
}
