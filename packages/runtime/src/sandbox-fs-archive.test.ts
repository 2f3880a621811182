import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  lstat,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  readlink,
  rename,
  rm,
  stat,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { gzipSync } from 'node:zlib';
import { Header, type HeaderData, Parser, type ReadEntry } from 'tar';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FsError } from './fs-errors.js';
import { SandboxFs } from './sandbox-fs.js';
import { extractArchive } from './sandbox-fs-archive.js';
import { MAX_PACK_DEPTH, packDirectory } from './sandbox-fs-pack.js';

let base: string;
let root: string;
let outside: string;
let fs: SandboxFs;
const CANARY = 'host canary: must never be read or written through a sandbox';

beforeEach(async () => {
  // Not under /tmp: a host-absolute symlink target re-rooted into the sandbox must land on its disk, and the files
  // calls refuse the sandbox's /tmp (its own tmpfs).
  base = await mkdtemp('/var/tmp/burrow-sfa-');
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

/** A raw tar built header by header, so that hostile entries can be made. */
function tarOf(entries: { header: HeaderData; body?: Buffer }[]): Buffer {
  const blocks: Buffer[] = [];
  for (const { header, body } of entries) {
    const block = Buffer.alloc(512);
    new Header({ mode: 0o644, mtime: new Date(0), size: body?.length ?? 0, ...header }).encode(block, 0);
    blocks.push(block);
    if (body !== undefined) {
      blocks.push(body, Buffer.alloc((512 - (body.length % 512)) % 512));
    }
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

async function entriesOf(stream: Readable): Promise<Map<string, { type: string; body: Buffer; linkpath?: string }>> {
  const parser = new Parser();
  const out = new Map<string, { type: string; body: Buffer; linkpath?: string }>();
  parser.on('entry', (e: ReadEntry) => {
    const chunks: Buffer[] = [];
    e.on('data', (c: Buffer) => chunks.push(c));
    e.on('end', () =>
      out.set(e.path, {
        type: e.type,
        body: Buffer.concat(chunks),
        ...(e.linkpath ? { linkpath: e.linkpath } : {}),
      }),
    );
  });
  for await (const chunk of stream) parser.write(chunk as Buffer);
  await new Promise<void>((resolve) => parser.end(resolve));
  return out;
}

describe('extractArchive', () => {
  it('extracts files, directories, links and modes, binary exact, plain and gzip', async () => {
    const bin = randomBytes(70_000);
    const archive = tarOf([
      { header: { path: 'proj/', type: 'Directory', mode: 0o750 } },
      { header: { path: 'proj/data.bin', type: 'File', mode: 0o600 }, body: bin },
      { header: { path: 'proj/run.sh', type: 'File', mode: 0o755 }, body: Buffer.from('#!/bin/sh\n') },
      { header: { path: 'proj/link', type: 'SymbolicLink', linkpath: 'data.bin' } },
      { header: { path: 'proj/hard', type: 'Link', linkpath: 'proj/data.bin' } },
    ]);
    for (const [i, body] of [archive, gzipSync(archive)].entries()) {
      const res = await extractArchive(fs, `/home/t${i}`, Readable.from([body]));
      expect(res).toMatchObject({ files: 2, directories: 1, symlinks: 1, hardLinks: 1, issueCount: 0 });
      expect(res.bytes).toBe(bin.length + 10);
      expect((await readFile(join(root, `home/t${i}/proj/data.bin`))).equals(bin)).toBe(true);
      expect((await stat(join(root, `home/t${i}/proj/run.sh`))).mode & 0o777).toBe(0o755);
      expect((await stat(join(root, `home/t${i}/proj/data.bin`))).mode & 0o777).toBe(0o600);
      expect(await readlink(join(root, `home/t${i}/proj/link`))).toBe('data.bin');
      expect((await stat(join(root, `home/t${i}/proj/hard`))).ino).toBe(
        (await stat(join(root, `home/t${i}/proj/data.bin`))).ino,
      );
    }
  });

  it('refuses or neutralises hostile entries and says which', async () => {
    const archive = tarOf([
      { header: { path: '../../../outside/canary', type: 'File' }, body: Buffer.from('pwned') },
      { header: { path: '/abs.txt', type: 'File' }, body: Buffer.from('abs') },
      { header: { path: 'esc', type: 'SymbolicLink', linkpath: '/' } },
      { header: { path: 'esc2', type: 'SymbolicLink', linkpath: '../../..' } },
      { header: { path: 'ok-dir-link', type: 'SymbolicLink', linkpath: '.' } },
      // Writing through a symlink the archive itself planted is refused, never followed.
      { header: { path: 'ok-dir-link/through.txt', type: 'File' }, body: Buffer.from('x') },
      { header: { path: 'hard-out', type: 'Link', linkpath: '../outside/canary' } },
      { header: { path: 'hard-abs', type: 'Link', linkpath: '/etc/passwd' } },
      { header: { path: 'dev', type: 'CharacterDevice', devmaj: 1, devmin: 3 } },
      { header: { path: 'fifo', type: 'FIFO' } },
      { header: { path: 'suid', type: 'File', mode: 0o4755 }, body: Buffer.from('s') },
    ]);
    const res = await extractArchive(fs, '/home/x', Readable.from([archive]));
    const byPath = new Map(res.issues.map((i) => [i.path, i]));
    expect(byPath.get('../../../outside/canary')?.action).toBe('skipped');
    expect(byPath.get('/abs.txt')?.action).toBe('neutralised');
    expect(byPath.get('esc')?.reason).toMatch(/absolute/);
    expect(byPath.get('esc2')?.reason).toMatch(/outside/);
    expect(byPath.get('ok-dir-link/through.txt')?.reason).toMatch(/symlink/);
    expect(byPath.get('hard-out')?.action).toBe('skipped');
    expect(byPath.get('hard-abs')?.action).toBe('skipped');
    expect(byPath.get('dev')?.reason).toMatch(/device/);
    expect(byPath.get('fifo')?.action).toBe('skipped');
    expect(byPath.get('suid')?.action).toBe('neutralised');
    expect(res.issueCount).toBe(res.issues.length);
    expect((await stat(join(root, 'home/x/suid'))).mode & 0o7777).toBe(0o755);
    expect(await readFile(join(root, 'home/x/abs.txt'), 'utf8')).toBe('abs');
    await expect(lstat(join(root, 'home/x/dev'))).rejects.toThrow();
    expect(await readFile(join(outside, 'canary'), 'utf8')).toBe(CANARY);
    await expect(lstat(join(root, 'through.txt'))).rejects.toThrow();
    await expect(lstat(join(root, 'home/through.txt'))).rejects.toThrow();
  });

  it('never writes outside when the sandbox planted a symlink to the host in the target', async () => {
    await mkdir(join(root, 'home/y'));
    await symlink(outside, join(root, 'home/y/sub'));
    const archive = tarOf([{ header: { path: 'sub/canary', type: 'File' }, body: Buffer.from('pwned') }]);
    const res = await extractArchive(fs, '/home/y', Readable.from([archive]));
    expect(res.issues[0]?.reason).toMatch(/symlink/);
    expect(await readFile(join(outside, 'canary'), 'utf8')).toBe(CANARY);
  });

  it('creates new files with their exact mode and replaces existing ones; a planted file symlink stays untouched', async () => {
    await mkdir(join(root, 'home/z'));
    await writeFile(join(root, 'home/z/old.txt'), 'old contents, longer than the new ones', { mode: 0o600 });
    await symlink(join(outside, 'canary'), join(root, 'home/z/link.txt'));
    const archive = tarOf([
      { header: { path: 'old.txt', type: 'File', mode: 0o755 }, body: Buffer.from('new') },
      { header: { path: 'fresh.txt', type: 'File', mode: 0o666 }, body: Buffer.from('fresh') },
      { header: { path: 'tight.txt', type: 'File', mode: 0o400 }, body: Buffer.from('tight') },
      { header: { path: 'link.txt', type: 'File' }, body: Buffer.from('pwned') },
    ]);
    const res = await extractArchive(fs, '/home/z', Readable.from([archive]));
    expect(res.files).toBe(3);
    expect(await readFile(join(root, 'home/z/old.txt'), 'utf8')).toBe('new');
    expect((await stat(join(root, 'home/z/old.txt'))).mode & 0o7777).toBe(0o755);
    // 0o666 survives whatever the process umask is.
    expect((await stat(join(root, 'home/z/fresh.txt'))).mode & 0o7777).toBe(0o666);
    expect((await stat(join(root, 'home/z/tight.txt'))).mode & 0o7777).toBe(0o400);
    expect((await stat(join(root, 'home/z/fresh.txt'))).mtime.getTime()).toBe(0);
    expect(res.issues.find((i) => i.path === 'link.txt')?.reason).toMatch(/symlink/);
    expect(await readFile(join(outside, 'canary'), 'utf8')).toBe(CANARY);
  });

  it('answers no_space on a full disk and leaves no partial file (small and large entries)', async () => {
    // A real ENOSPC: the sandbox root on a 1 MiB tmpfs. The partial file used to stay, keeping the disk full.
    const small = join(base, 'small');
    await mkdir(small);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', small]);
    try {
      const smallFs = new SandboxFs(small);
      for (const size of [200 * 1024, 3 * 1024 * 1024]) {
        await writeFile(join(small, 'filler'), Buffer.alloc(900 * 1024));
        const archive = tarOf([{ header: { path: 'big.bin', type: 'File' }, body: randomBytes(size) }]);
        await expect(extractArchive(smallFs, '/x', Readable.from([archive]))).rejects.toMatchObject({
          code: 'no_space',
        });
        expect(await readdir(join(small, 'x'))).toEqual([]);
        await rm(join(small, 'filler'));
      }
    } finally {
      execFileSync('umount', [small]);
    }
  });

  it('answers invalid_request for a corrupt archive', async () => {
    const bad = Buffer.alloc(2048, 7);
    const err = await extractArchive(fs, '/home/z', Readable.from([bad])).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FsError);
    expect((err as FsError).code).toBe('invalid_request');
    // gzip's magic followed by what is not gzip: zlib's error, not an internal one.
    for (const tail of [
      '00676172626167650a',
      `000000000000ff${Buffer.from('not deflate data at all').toString('hex')}`,
    ]) {
      const gz = Buffer.from(`1f8b08${tail}`, 'hex');
      const zerr = await extractArchive(fs, '/home/z', Readable.from([gz])).catch((e: unknown) => e);
      expect(zerr).toBeInstanceOf(FsError);
      expect((zerr as FsError).code, String(zerr)).toBe('invalid_request');
      expect((zerr as FsError).message).toContain('not a valid tar archive');
    }
  });
});

describe('packDirectory', () => {
  it('round-trips a tree (binary exact, long names, symlinks kept as links, not followed)', async () => {
    const bin = randomBytes(3 * 1024 * 1024 + 17);
    const longName = `${'n'.repeat(120)}/${'m'.repeat(120)}.txt`;
    await fs.write('/home/p/a/b.bin', bin);
    await fs.write(`/home/p/${longName}`, Buffer.from('long'));
    await symlink(outside, join(root, 'home/p/host-link'));
    for (const gzip of [false, true]) {
      const stream = await packDirectory(fs, '/home/p', { gzip });
      const got = await entriesOf(stream);
      expect(got.get('a/b.bin')?.body.equals(bin)).toBe(true);
      expect(got.get(longName)?.body.toString()).toBe('long');
      expect(got.get('host-link')).toMatchObject({ type: 'SymbolicLink', linkpath: outside });
      expect([...got.keys()].some((k) => k.includes('canary'))).toBe(false);
      expect(got.get('a/')?.type).toBe('Directory');
    }
    const copy = await extractArchive(fs, '/home/copy', await packDirectory(fs, '/home/p'));
    expect(copy.issueCount).toBe(1); // the link to a host-absolute path is refused on the way back in
    expect((await readFile(join(root, 'home/copy/a/b.bin'))).equals(bin)).toBe(true);
  });

  it('refuses a file and resolves a symlinked directory inside the root', async () => {
    await fs.write('/home/f', Buffer.from('x'));
    await expect(packDirectory(fs, '/home/f')).rejects.toMatchObject({ code: 'not_a_directory' });
    await symlink('/', join(root, 'to-root'));
    const got = await entriesOf(await packDirectory(fs, '/to-root/home'));
    expect(got.get('f')?.body.toString()).toBe('x');
  });

  it('packs a tree MAX_PACK_DEPTH levels deep, ends the stream with invalid_path past it, and closes every handle', async () => {
    // A recursive walk overflowed the call stack (HTTP 500 after 80 s) on a tree 2,000 levels deep.
    const deep = Array.from({ length: MAX_PACK_DEPTH }, () => 'd').join('/');
    await mkdir(join(root, 'home/deep', deep), { recursive: true });
    await writeFile(join(root, 'home/deep', deep, 'leaf'), 'leaf');
    const fdsBefore = (await readdir('/proc/self/fd')).length;
    const got = await entriesOf(await packDirectory(fs, '/home/deep'));
    expect(got.get(`${deep}/leaf`)?.body.toString()).toBe('leaf');
    expect(got.size).toBe(MAX_PACK_DEPTH + 1);
    await mkdir(join(root, 'home/deep', deep, 'd'));
    await expect(entriesOf(await packDirectory(fs, '/home/deep'))).rejects.toMatchObject({ code: 'invalid_path' });
    expect((await readdir('/proc/self/fd')).length).toBeLessThanOrEqual(fdsBefore);
  });
});

describe('SandboxFs chmod and exists', () => {
  it('sets modes through a pinned handle and never on a host file behind a symlink', async () => {
    await fs.write('/home/s.sh', Buffer.from('x'));
    expect((await fs.chmod('/home/s.sh', 0o4750)).mode).toBe(0o4750);
    await symlink(join(outside, 'canary'), join(root, 'home/out'));
    const before = (await stat(join(outside, 'canary'))).mode;
    await expect(fs.chmod('/home/out', 0o777)).rejects.toMatchObject({ code: 'file_not_found' });
    expect((await stat(join(outside, 'canary'))).mode).toBe(before);
    expect(await fs.exists('/home/s.sh')).toBe(true);
    expect(await fs.exists('/home/nope')).toBe(false);
    expect(await fs.exists('/home/s.sh/under')).toBe(false);
    expect(await fs.exists('/home/out')).toBe(true); // the dangling link itself
  });
});

describe('archives and chmod under a directory ⇄ symlink flip (race)', () => {
  it('never writes, chmods or packs a host file while /home/flip flips to a symlink out', async () => {
    await mkdir(join(root, 'home/flip'));
    const canaryMode = (await stat(join(outside, 'canary'))).mode;
    let stop = false;
    const flipper = (async () => {
      for (let n = 0; !stop; n++) {
        const p = join(root, 'home/flip');
        await rename(p, join(root, `home/flip-dir-${n}`)).catch(() => undefined);
        await symlink(n % 2 === 0 ? outside : '../../outside', p).catch(() => undefined);
        await new Promise((r) => setImmediate(r));
        await rm(p, { force: true }).catch(() => undefined);
        await rename(join(root, `home/flip-dir-${n}`), p).catch(() => undefined);
      }
    })();
    const archive = tarOf([{ header: { path: 'canary', type: 'File' }, body: Buffer.from('pwned') }]);
    let extracted = 0;
    for (let i = 0; i < 600; i++) {
      try {
        if (i % 3 === 0) {
          await extractArchive(fs, '/home/flip', Readable.from([archive]));
          extracted++;
        } else if (i % 3 === 1) {
          await fs.chmod('/home/flip/canary', 0o777);
        } else {
          const got = await entriesOf(await packDirectory(fs, '/home/flip'));
          expect(got.get('canary')?.body.toString() ?? 'pwned').toBe('pwned');
        }
      } catch (err) {
        if (!(err instanceof FsError)) throw err;
      }
    }
    stop = true;
    await flipper;
    expect(await readFile(join(outside, 'canary'), 'utf8')).toBe(CANARY);
    expect((await stat(join(outside, 'canary'))).mode).toBe(canaryMode);
    expect(await readdir(outside)).toEqual(['canary']);
    expect(extracted).toBeGreaterThan(0);
  });
});
