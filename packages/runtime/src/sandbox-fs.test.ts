import { mkdir, mkdtemp, open, readdir, readFile, rename, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FsError } from './fs-errors.js';
import { isUploadTempName, SandboxFs } from './sandbox-fs.js';
import { writeCoalesced } from './write-coalesced.js';

let base: string;
let root: string;
let outside: string;
let fs: SandboxFs;
const CANARY = 'host canary: must never be read through a sandbox';

beforeEach(async () => {
  // Not under /tmp: a host-absolute symlink target re-rooted into the sandbox must land on its disk, and the files
  // calls refuse the sandbox's /tmp (its own tmpfs).
  base = await mkdtemp('/var/tmp/burrow-sfs-');
  root = join(base, 'root');
  outside = join(base, 'outside');
  await mkdir(join(root, 'home'), { recursive: true });
  await mkdir(outside);
  await writeFile(join(outside, 'canary'), CANARY);
  fs = new SandboxFs(root);
});

afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    if (err instanceof FsError) return err.code;
    throw err;
  }
  return 'no error';
}

async function readAll(path: string): Promise<Buffer> {
  const { stream } = await fs.openRead(path);
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

describe('SandboxFs basics', () => {
  it('writes, reads binary exact, stats and lists', async () => {
    const bytes = Buffer.from([0, 255, 0xc3, 0x28, 10, 0, 1, 2]);
    const info = await fs.write('/home/a/b/c.bin', bytes, { mode: 0o600 });
    expect(info).toMatchObject({ path: '/home/a/b/c.bin', name: 'c.bin', type: 'file', sizeBytes: 8, mode: 0o600 });
    expect(await readAll('/home/a/b/c.bin')).toEqual(bytes);
    expect(await readFile(join(root, 'home/a/b/c.bin'))).toEqual(bytes);
    const list = await fs.list('/home', { depth: 3 });
    expect(list.map((e) => e.path)).toEqual(['/home/a', '/home/a/b', '/home/a/b/c.bin']);
    expect((await fs.list('/home')).map((e) => e.path)).toEqual(['/home/a']);
  });

  it('streams a write from a Readable and replaces atomically', async () => {
    await fs.write('/f', Buffer.from('old'));
    await fs.write('/f', Readable.from([Buffer.from('new '), Buffer.from('content')]));
    expect((await readAll('/f')).toString()).toBe('new content');
    const names = (await fs.list('/', { depth: 2 })).map((e) => e.name);
    expect(names.filter((n) => isUploadTempName(n))).toEqual([]);
  });

  it('stages writes in the upload temp dir; the sweep removes only its leftovers there', async () => {
    await fs.write('/home/x', Buffer.from('x'));
    expect((await stat(join(root, '.burrow-tmp'))).isDirectory()).toBe(true);
    // What a server killed mid-upload leaves, next to things that are not ours to remove.
    const tmp = join(root, '.burrow-tmp');
    await writeFile(join(tmp, '.upload.burrow-0123456789ab'), 'partial');
    await writeFile(join(tmp, '.x.burrow-abcdefabcdef'), 'partial');
    await writeFile(join(tmp, 'user-file'), 'keep');
    await mkdir(join(tmp, '.dir.burrow-0123456789ab'));
    await writeFile(join(root, 'home', '.y.burrow-0123456789ab'), 'not in the temp dir: keep');
    expect((await fs.sweepUploadTemp()).sort()).toEqual(['.upload.burrow-0123456789ab', '.x.burrow-abcdefabcdef']);
    expect((await fs.list('/.burrow-tmp')).map((e) => e.name)).toEqual(['.dir.burrow-0123456789ab', 'user-file']);
    expect(await fs.exists('/home/.y.burrow-0123456789ab')).toBe(true);
    expect(await fs.sweepUploadTemp()).toEqual([]);
  });

  it('writes still work when the sandbox replaced the temp dir with a file or a symlink out of the root', async () => {
    await writeFile(join(root, '.burrow-tmp'), 'not a dir');
    await fs.write('/home/a', Buffer.from('a'));
    expect(await readFile(join(root, 'home/a'), 'utf8')).toBe('a');
    expect(await fs.sweepUploadTemp()).toEqual([]);
    await rm(join(root, '.burrow-tmp'));
    await symlink(outside, join(root, '.burrow-tmp'));
    await fs.write('/home/b', Buffer.from('b'));
    expect(await readFile(join(root, 'home/b'), 'utf8')).toBe('b');
    // The symlink is re-rooted: the staging happened inside the root, never in the host directory it names.
    expect((await readdir(outside)).sort()).toEqual(['canary']);
  });

  it('streams a multi-MiB write in uneven chunks binary exact (overlapping writes stay in order)', async () => {
    // 5 MiB + 3 in pieces of 1..64 KiB: several batches of about 1 MiB, each written while the next is gathered.
    const data = Buffer.alloc(5 * 1024 * 1024 + 3);
    for (let i = 0; i < data.length; i++) data[i] = (i * 7919) % 251;
    const pieces: Buffer[] = [];
    for (let off = 0, n = 1; off < data.length; n = (n * 31 + 17) % 65_536 || 1) {
      pieces.push(data.subarray(off, off + n));
      off += n;
    }
    const info = await fs.write('/big.bin', Readable.from(pieces));
    expect(info.sizeBytes).toBe(data.length);
    expect((await readAll('/big.bin')).equals(data)).toBe(true);
  });

  it('a source failing mid-write leaves no file and no temporary behind', async () => {
    async function* failing() {
      yield Buffer.alloc(3 * 1024 * 1024, 1);
      throw new Error('client went away');
    }
    await expect(fs.write('/half.bin', Readable.from(failing()))).rejects.toThrow();
    expect((await fs.list('/')).map((e) => e.name).filter((n) => n.includes('half'))).toEqual([]);
  });

  it('writeCoalesced: chunks buffered before it reads, a failing write, a source closed early', async () => {
    // 40 chunks of 100 KiB already queued in the stream (a fast client, a slow start): every byte, in order.
    const queued = new PassThrough({ highWaterMark: 8 * 1024 * 1024 });
    const data = Buffer.alloc(40 * 100 * 1024);
    for (let i = 0; i < data.length; i++) data[i] = (i * 131) % 253;
    for (let off = 0; off < data.length; off += 100 * 1024) queued.write(data.subarray(off, off + 100 * 1024));
    queued.end();
    const path = join(base, 'queued.bin');
    const fh = await open(path, 'w');
    expect(await writeCoalesced(fh, queued)).toBe(data.length);
    await fh.close();
    expect((await readFile(path)).equals(data)).toBe(true);
    // A write that fails (a read-only handle: EBADF) is thrown, and the source is destroyed, not left flowing.
    const readOnly = await open(path, 'r');
    const source = Readable.from([Buffer.alloc(2 * 1024 * 1024, 1), Buffer.alloc(2 * 1024 * 1024, 2)]);
    await expect(writeCoalesced(readOnly, source)).rejects.toMatchObject({ code: 'EBADF' });
    expect(source.destroyed).toBe(true);
    // A source destroyed without an error before its end is an error, not a short file taken as whole.
    const cut = new PassThrough();
    const written = writeCoalesced(readOnly, cut);
    cut.write(Buffer.from('abc'));
    cut.destroy();
    await expect(written).rejects.toThrow('closed before its end');
    await readOnly.close();
  });

  it('mkdir -p, rename, remove with and without recursive', async () => {
    await fs.mkdir('/x/y/z');
    await fs.mkdir('/x/y/z');
    expect((await fs.stat('/x/y/z')).type).toBe('directory');
    await fs.write('/x/y/z/f', Buffer.from('1'));
    expect(await codeOf(fs.remove('/x'))).toBe('directory_not_empty');
    await fs.rename('/x/y/z/f', '/x/g');
    expect((await readAll('/x/g')).toString()).toBe('1');
    await fs.remove('/x', { recursive: true });
    expect(await codeOf(fs.stat('/x'))).toBe('file_not_found');
  });

  it('answers clear codes for bad paths and kinds', async () => {
    await fs.write('/file', Buffer.from('x'));
    expect(await codeOf(fs.stat('relative'))).toBe('invalid_path');
    expect(await codeOf(fs.stat('/a\0b'))).toBe('invalid_path');
    expect(await codeOf(fs.stat(`/${'a'.repeat(300)}`))).toBe('invalid_path');
    expect(await codeOf(fs.stat('/missing'))).toBe('file_not_found');
    expect(await codeOf(fs.openRead('/home'))).toBe('is_a_directory');
    expect(await codeOf(fs.write('/home', Buffer.from('x')))).toBe('is_a_directory');
    expect(await codeOf(fs.write('/file/child', Buffer.from('x')))).toBe('not_a_directory');
    expect(await codeOf(fs.mkdir('/file'))).toBe('file_exists');
    expect(await codeOf(fs.remove('/'))).toBe('invalid_path');
    expect(await codeOf(fs.rename('/home', '/home/inside'))).toBe('invalid_path');
  });

  it('refuses /proc, /sys and /dev (the sandbox kernel serves them, not its disk), also through .. and symlinks', async () => {
    await mkdir(join(root, 'dev'));
    await symlink('../proc/self/mounts', join(root, 'home', 'mtab'));
    for (const path of ['/proc/cpuinfo', '/dev/null', '/sys', '/home/../dev/x', '/home/mtab/x']) {
      expect(await codeOf(fs.stat(path))).toBe('invalid_path');
    }
    expect(await codeOf(fs.write('/dev/null', Buffer.from('x')))).toBe('invalid_path');
    expect(await codeOf(fs.mkdir('/proc/x'))).toBe('invalid_path');
    await expect(fs.stat('/dev')).rejects.toThrow(/virtual filesystem of its kernel.*exec/);
    // Names that only start like them are ordinary.
    await fs.write('/devices/x', Buffer.from('x'));
    expect((await readAll('/devices/x')).toString()).toBe('x');
  });
});

describe('SandboxFs confinement', () => {
  it('clamps .. at the root', async () => {
    await fs.write('/../../../../outside/canary', Buffer.from('inside'));
    expect(await readFile(join(outside, 'canary'), 'utf8')).toBe(CANARY);
    expect((await readAll('/outside/canary')).toString()).toBe('inside');
    expect((await fs.stat('/home/../..')).path).toBe('/');
  });

  it('re-roots absolute and relative symlinks planted in the sandbox', async () => {
    await symlink('/', join(root, 'escape-abs'));
    await symlink('../../../../../', join(root, 'home', 'escape-rel'));
    await symlink(join(outside, 'canary'), join(root, 'canary-link'));
    for (const p of ['/escape-abs/outside/canary', '/home/escape-rel/outside/canary']) {
      expect(await codeOf(fs.openRead(p))).toBe('file_not_found');
    }
    // A host-absolute target means the same path inside the sandbox, which does not exist there.
    expect(await codeOf(fs.openRead('/canary-link'))).toBe('file_not_found');
    await fs.write('/canary-link', Buffer.from('written inside'));
    expect(await readFile(join(outside, 'canary'), 'utf8')).toBe(CANARY);
    expect(await readFile(join(root, outside, 'canary'), 'utf8')).toBe('written inside');
    expect((await fs.stat('/canary-link')).symlinkTarget).toBe(join(outside, 'canary'));
  });

  it('removes a symlink, never its target, and recursive remove does not follow links', async () => {
    await symlink(outside, join(root, 'home', 'out'));
    await fs.remove('/home', { recursive: true });
    expect(await readFile(join(outside, 'canary'), 'utf8')).toBe(CANARY);
    expect(await codeOf(fs.stat('/home'))).toBe('file_not_found');
  });

  it('reports symlink loops as invalid_path', async () => {
    await symlink('/loop2', join(root, 'loop1'));
    await symlink('/loop1', join(root, 'loop2'));
    expect(await codeOf(fs.openRead('/loop1/x'))).toBe('invalid_path');
  });

  it('never touches host files while a directory flips to a symlink to / (race)', async () => {
    await mkdir(join(root, 'flip'));
    let stop = false;
    const flipper = (async () => {
      let n = 0;
      while (!stop) {
        const p = join(root, 'flip');
        // Swap the directory for a symlink to the host root and back, as hostile code in a sandbox would.
        await rename(p, join(root, `flip-dir-${n}`)).catch(() => undefined);
        // Alternate a host-absolute target and a relative one that a host-side lookup would follow to the canary.
        await symlink(n % 2 === 0 ? outside : '../outside', p).catch(() => undefined);
        await new Promise((r) => setImmediate(r));
        await rm(p, { force: true }).catch(() => undefined);
        await rename(join(root, `flip-dir-${n}`), p).catch(() => undefined);
        n++;
      }
    })();
    const results = { wrote: 0, read: 0 };
    for (let i = 0; i < 1500; i++) {
      const op = i % 3;
      try {
        if (op === 0) {
          await fs.write('/flip/canary', Buffer.from(`w${i}`));
          results.wrote++;
        } else if (op === 1) {
          const got = (await readAll('/flip/canary')).toString();
          expect(got).not.toBe(CANARY);
          results.read++;
        } else {
          await fs.remove('/flip/canary');
        }
      } catch (err) {
        if (!(err instanceof FsError)) throw err;
      }
    }
    stop = true;
    await flipper;
    expect(await readFile(join(outside, 'canary'), 'utf8')).toBe(CANARY);
    expect((await stat(outside)).isDirectory()).toBe(true);
    expect(results.wrote).toBeGreaterThan(0);
  });
});
