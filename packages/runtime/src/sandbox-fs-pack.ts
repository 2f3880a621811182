import {
  closeSync,
  constants as fsc,
  fstatSync,
  lstatSync,
  openSync,
  read,
  readdirSync,
  readlinkSync,
  readSync,
} from 'node:fs';
import { Readable } from 'node:stream';
import { promisify } from 'node:util';
import { createGzip } from 'node:zlib';
import { Header, type HeaderData, Pax } from 'tar';
import { FsError } from './fs-errors.js';
import { DIR_FLAGS, type SandboxFs } from './sandbox-fs.js';
import { SMALL_FILE_BYTES } from './sandbox-fs-archive.js';

const readAsync = promisify(read);

/** Read size while packing a file: 1 MiB. */
const READ_CHUNK_BYTES = 1024 * 1024;

/** Packed output is handed on in chunks of about this size rather than one per header or file: 64 KiB. */
const PACK_CHUNK_BYTES = 64 * 1024;
/** Directory levels an archive download descends below its root: each holds one directory handle while walked. */
export const MAX_PACK_DEPTH = 256;

/**
 * The directory `path` of a sandbox as a tar stream (optionally gzip, level 1), produced while it is read: files,
 * directories and symlinks (as links, never followed); sockets, FIFOs and devices are left out. Every name is opened
 * through a held directory handle with `O_NOFOLLOW`, so a swap for a symlink mid-walk cannot reach outside.
 * A file that shrinks while read is padded with zeros to the size in its header; one that grows is cut there.
 * @throws FsError resolving `path` (before any byte is produced)
 */
export async function packDirectory(fs: SandboxFs, path: string, options: { gzip?: boolean } = {}): Promise<Readable> {
  const { handle } = await fs.openDir(path);
  const tar = Readable.from(
    (async function* () {
      try {
        const out = new ChunkBuffer();
        yield* walkTree(handle.fd, out);
        out.push(Buffer.alloc(1024));
        yield out.take() as Buffer;
      } finally {
        await handle.close().catch(() => undefined);
      }
    })(),
    { objectMode: false, highWaterMark: READ_CHUNK_BYTES },
  );
  if (options.gzip !== true) return tar;
  const gzip = createGzip({ level: 1 });
  tar.on('error', (err) => gzip.destroy(err));
  return tar.pipe(gzip);
}

/** Collects small pieces of a tar stream into chunks of about {@link PACK_CHUNK_BYTES}. */
class ChunkBuffer {
  private parts: Buffer[] = [];
  private bytes = 0;
  push(buf: Buffer): void {
    this.parts.push(buf);
    this.bytes += buf.length;
  }
  get full(): boolean {
    return this.bytes >= PACK_CHUNK_BYTES;
  }
  take(): Buffer | null {
    if (this.bytes === 0) return null;
    const out = this.parts.length === 1 ? (this.parts[0] as Buffer) : Buffer.concat(this.parts, this.bytes);
    this.parts = [];
    this.bytes = 0;
    return out;
  }
}

/** One directory being walked by {@link walkTree}: its held handle, its path in the archive and its sorted names. */
interface WalkFrame {
  fd: number;
  rel: string;
  names: string[];
  next: number;
}

function listNames(dirFd: number): string[] {
  try {
    return readdirSync(`/proc/self/fd/${dirFd}`).sort();
  } catch {
    return [];
  }
}

/**
 * Walks the tree below the directory held open as `rootFd` (not closed here), depth first, with an explicit stack of
 * held directory handles: a deep tree costs one handle per level, no call stack and no chain of nested generators
 * (a recursive walk overflowed the stack and slowed quadratically on a tree 2,000 levels deep).
 * Names, stats and small files use blocking calls (a few microseconds each, where a trip through libuv's thread pool
 * costs tens); large files are read asynchronously in 1 MiB chunks.
 * @throws FsError `invalid_path` past {@link MAX_PACK_DEPTH} levels (the stream ends with that error).
 */
async function* walkTree(rootFd: number, out: ChunkBuffer): AsyncGenerator<Buffer> {
  const stack: WalkFrame[] = [{ fd: rootFd, rel: '', names: listNames(rootFd), next: 0 }];
  try {
    while (stack.length > 0) {
      const frame = stack[stack.length - 1] as WalkFrame;
      const name = frame.names[frame.next++];
      if (name === undefined) {
        stack.pop();
        if (stack.length > 0) closeSync(frame.fd); // the root handle belongs to the caller
        continue;
      }
      const hostPath = `/proc/self/fd/${frame.fd}/${name}`;
      const relPath = frame.rel === '' ? name : `${frame.rel}/${name}`;
      const st = lstatSync(hostPath, { throwIfNoEntry: false });
      if (st === undefined) continue; // removed meanwhile
      const base = { mode: st.mode & 0o7777, mtime: st.mtime, uid: st.uid, gid: st.gid };
      if (st.isDirectory()) {
        if (stack.length > MAX_PACK_DEPTH) {
          throw new FsError(
            'invalid_path',
            `${relPath} is more than ${MAX_PACK_DEPTH} directories deep; download a deeper subdirectory on its own`,
          );
        }
        const child = tryOpenSync(hostPath, DIR_FLAGS);
        if (child === null) continue; // swapped for something else meanwhile
        out.push(headerBlocks({ ...base, path: `${relPath}/`, type: 'Directory', size: 0 }));
        stack.push({ fd: child, rel: relPath, names: listNames(child), next: 0 });
      } else if (st.isSymbolicLink()) {
        let target: string;
        try {
          target = readlinkSync(hostPath);
        } catch {
          continue;
        }
        out.push(headerBlocks({ ...base, path: relPath, type: 'SymbolicLink', size: 0, linkpath: target }));
      } else if (st.isFile()) {
        const fd = tryOpenSync(hostPath, fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK);
        if (fd === null) continue;
        try {
          const fst = fstatSync(fd);
          if (!fst.isFile()) continue;
          out.push(headerBlocks({ ...base, mode: fst.mode & 0o7777, path: relPath, type: 'File', size: fst.size }));
          if (fst.size <= SMALL_FILE_BYTES) {
            out.push(readSmallFile(fd, fst.size));
          } else {
            const head = out.take();
            if (head !== null) yield head;
            yield* fileBlocks(fd, fst.size);
          }
        } finally {
          closeSync(fd);
        }
      }
      if (out.full) yield out.take() as Buffer;
    }
  } finally {
    for (const frame of stack.slice(1)) closeSync(frame.fd);
  }
}

function tryOpenSync(path: string, flags: number): number | null {
  try {
    return openSync(path, flags);
  } catch {
    return null;
  }
}

/** `sizeBytes` of a file plus the tar padding: cut where it grew, zero-padded where it shrank since its stat. */
function readSmallFile(fd: number, sizeBytes: number): Buffer {
  const buf = Buffer.alloc(sizeBytes + ((512 - (sizeBytes % 512)) % 512));
  for (let off = 0; off < sizeBytes; ) {
    const n = readSync(fd, buf, off, sizeBytes - off, null);
    if (n === 0) break;
    off += n;
  }
  return buf;
}

async function* fileBlocks(fd: number, sizeBytes: number): AsyncGenerator<Buffer> {
  let left = sizeBytes;
  while (left > 0) {
    const buf = Buffer.allocUnsafe(Math.min(left, READ_CHUNK_BYTES));
    const { bytesRead } = await readAsync(fd, buf, 0, buf.length, null);
    if (bytesRead === 0) break;
    yield bytesRead === buf.length ? buf : buf.subarray(0, bytesRead);
    left -= bytesRead;
  }
  while (left > 0) {
    const n = Math.min(left, READ_CHUNK_BYTES);
    yield Buffer.alloc(n);
    left -= n;
  }
  const pad = (512 - (sizeBytes % 512)) % 512;
  if (pad > 0) yield Buffer.alloc(pad);
}

/** A ustar header block, preceded by a PAX extended header when a field does not fit (long names, big sizes). */
function headerBlocks(data: HeaderData): Buffer {
  const block = Buffer.alloc(512);
  const needPax = new Header(data).encode(block, 0);
  if (!needPax) return block;
  const ex: HeaderData = {};
  if (data.path !== undefined) ex.path = data.path;
  if (data.linkpath !== undefined) ex.linkpath = data.linkpath;
  if (data.size !== undefined) ex.size = data.size;
  if (data.mtime !== undefined) ex.mtime = data.mtime;
  const pax = new Pax(ex).encode();
  return Buffer.concat([pax, block]);
}
