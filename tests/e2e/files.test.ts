/**
 * End to end: files through the SDK and the CLI against a REAL server (real runsc sandboxes on ext4 disk images).
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import type { FileWatchEvent } from '@burrow/contract';
import { FileSystemError, Sandbox } from '@burrow/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './burrow-test-server.js';
import { runCli } from './cli-runner.js';

const RUN_ID = `files-${Date.now().toString(36)}`;
let server: TestServer;
let sandbox: Sandbox;
let localDir: string;
const connection = () => ({ apiUrl: server.apiUrl, apiKey: server.adminKey });
const cli = (args: string[]) =>
  runCli(args, { env: { BURROW_URL: server.apiUrl, BURROW_API_KEY: server.adminKey }, timeoutMs: 120_000 });

beforeAll(async () => {
  server = await startTestServer();
  sandbox = await Sandbox.create({ ...connection(), labels: { e2e: RUN_ID } });
  localDir = await mkdtemp(join(tmpdir(), 'burrow-files-e2e-'));
});

afterAll(async () => {
  try {
    if (server !== undefined) {
      for await (const left of Sandbox.listAll({ ...connection(), labels: { e2e: RUN_ID } })) {
        await left.delete().catch(() => {});
      }
    }
  } finally {
    await server?.close();
    if (localDir !== undefined) await rm(localDir, { recursive: true, force: true });
  }
});

/** A deterministic pseudo-random stream of `sizeBytes`, never held whole, and its sha256. */
function bigStream(sizeBytes: number): { stream: Readable; digest: Promise<string> } {
  const hash = createHash('sha256');
  const chunk = randomBytes(1024 * 1024);
  let digestResolve!: (d: string) => void;
  const digest = new Promise<string>((r) => {
    digestResolve = r;
  });
  const stream = Readable.from(
    (async function* () {
      for (let left = sizeBytes, i = 0; left > 0; i++) {
        const piece = Buffer.from(chunk.subarray(0, Math.min(left, chunk.length)));
        if (piece.length >= 4) piece.writeUInt32LE(i, 0);
        hash.update(piece);
        left -= piece.length;
        yield piece;
      }
      digestResolve(hash.digest('hex'));
    })(),
  );
  return { stream, digest };
}

describe('files on a real sandbox', () => {
  it('streams a 96 MiB file up and down, binary exact', async () => {
    const size = 96 * 1024 * 1024 + 3;
    const { stream, digest } = bigStream(size);
    const info = await sandbox.files.write('/root/big.bin', stream);
    expect(info.sizeBytes).toBe(size);
    const inside = await sandbox.commands.run(['sha256sum', '/root/big.bin']);
    expect(inside.stdout.split(' ')[0]).toBe(await digest);
    const { stream: down, sizeBytes } = await sandbox.files.readStream('/root/big.bin');
    expect(sizeBytes).toBe(size);
    const hash = createHash('sha256');
    for await (const c of down) hash.update(c);
    expect(hash.digest('hex')).toBe(await digest);
  });

  it('writeFromFile and readToFile move a local file up and down binary exact; a missing one is FileNotFoundError', async () => {
    const local = join(localDir, 'up.bin');
    const bytes = randomBytes(5 * 1024 * 1024 + 7);
    await writeFile(local, bytes);
    const info = await sandbox.files.writeFromFile('/root/from-file.bin', local, { mode: 0o600 });
    expect(info).toMatchObject({ sizeBytes: bytes.length, mode: 0o600 });
    const back = join(localDir, 'down.bin');
    const seen: number[] = [];
    const result = await sandbox.files.readToFile('/root/from-file.bin', back, { onProgress: (n) => seen.push(n) });
    expect(result).toEqual({ sizeBytes: bytes.length });
    expect(seen.at(-1)).toBe(bytes.length);
    expect(seen.every((n, i) => i === 0 || n > (seen[i - 1] as number))).toBe(true);
    expect((await readFile(back)).equals(bytes)).toBe(true);
    await expect(sandbox.files.readToFile('/root/missing.bin', join(localDir, 'x'))).rejects.toMatchObject({
      code: 'file_not_found',
    });
  });

  it('writeMany, exists, chmod, stat with symlink target, seen by code inside', async () => {
    const items = await sandbox.files.writeMany([
      { path: '/root/many/a.sh', data: '#!/bin/sh\necho from-a\n', mode: 0o755 },
      { path: '/root/many/b.bin', data: new Uint8Array([0, 1, 254, 255]) },
    ]);
    expect(items.map((i) => i.path)).toEqual(['/root/many/a.sh', '/root/many/b.bin']);
    expect((await sandbox.commands.run(['/root/many/a.sh'])).stdout).toBe('from-a\n');
    expect(await sandbox.files.exists('/root/many/b.bin')).toBe(true);
    expect(await sandbox.files.exists('/root/many/none')).toBe(false);
    expect((await sandbox.files.chmod('/root/many/b.bin', 0o600)).mode).toBe(0o600);
    expect((await sandbox.commands.run(['stat', '-c', '%a', '/root/many/b.bin'])).stdout.trim()).toBe('600');
    await sandbox.commands.run(['ln', '-s', '/etc/hostname', '/root/many/link'], { check: true });
    expect((await sandbox.files.stat('/root/many/link')).symlinkTarget).toBe('/etc/hostname');
  });

  it('watch sees create, modify, rename and delete done by code in the sandbox', async () => {
    await sandbox.files.mkdir('/root/watched/sub');
    const abort = new AbortController();
    const events: FileWatchEvent[] = [];
    let ready!: () => void;
    const isReady = new Promise<void>((r) => {
      ready = r;
    });
    const watching = (async () => {
      for await (const e of sandbox.files.watch('/root/watched', { recursive: true, signal: abort.signal })) {
        events.push(e);
        if (e.type === 'ready') ready();
      }
    })();
    await isReady;
    await sandbox.commands.run(
      [
        'sh',
        '-c',
        'echo one > /root/watched/a.txt; sleep 0.2; echo two >> /root/watched/a.txt; sleep 0.2; ' +
          'mv /root/watched/a.txt /root/watched/b.txt; sleep 0.2; echo deep > /root/watched/sub/d.txt; sleep 0.2; ' +
          'rm /root/watched/b.txt',
      ],
      { check: true },
    );
    const want = (pred: (e: FileWatchEvent) => boolean) => events.some(pred);
    for (let i = 0; i < 300; i++) {
      if (want((e) => e.type === 'delete' && e.path === '/root/watched/b.txt')) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    abort.abort();
    await watching;
    const summary = JSON.stringify(events);
    expect(
      want((e) => e.type === 'create' && e.path === '/root/watched/a.txt'),
      summary,
    ).toBe(true);
    expect(
      want((e) => e.type === 'modify' && e.path === '/root/watched/a.txt'),
      summary,
    ).toBe(true);
    expect(
      want((e) => e.type === 'rename' && e.oldPath === '/root/watched/a.txt' && e.path === '/root/watched/b.txt'),
      summary,
    ).toBe(true);
    expect(
      want((e) => e.type === 'create' && e.path === '/root/watched/sub/d.txt'),
      summary,
    ).toBe(true);
    expect(
      want((e) => e.type === 'delete' && e.path === '/root/watched/b.txt'),
      summary,
    ).toBe(true);
  });

  it('answers no_space when the sandbox disk fills, and the sandbox keeps working', async () => {
    const small = await Sandbox.create({ ...connection(), labels: { e2e: RUN_ID }, diskMiB: 64 });
    try {
      const { stream } = bigStream(200 * 1024 * 1024);
      const err = await small.files.write('/root/fill.bin', stream).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(FileSystemError);
      expect((err as FileSystemError).code).toBe('no_space');
      // The failed write left no partial file behind and the disk is usable again.
      expect(await small.files.exists('/root/fill.bin')).toBe(false);
      await small.files.write('/root/after.txt', 'still fine');
      expect((await small.commands.run(['cat', '/root/after.txt'])).stdout).toBe('still fine');
    } finally {
      await small.delete();
    }
  });

  it('files calls on a paused sandbox resume it (auto-resume) and see the same disk', async () => {
    await sandbox.files.write('/root/before-pause.txt', 'kept');
    await sandbox.pause();
    expect((await sandbox.refresh()).state).toBe('paused');
    expect(await sandbox.files.readText('/root/before-pause.txt')).toBe('kept');
    expect((await sandbox.refresh()).state).toBe('running');
    await sandbox.pause();
    await sandbox.files.write('/root/while-paused.txt', 'written');
    expect((await sandbox.commands.run(['cat', '/root/while-paused.txt'])).stdout).toBe('written');
  });

  it('CLI: put and get a directory as tar, put and get a file, chmod, rm', async () => {
    const src = join(localDir, 'src');
    await mkdir(join(src, 'nested/deeper'), { recursive: true });
    const bin = randomBytes(300_000);
    await writeFile(join(src, 'nested/deeper/data.bin'), bin);
    await writeFile(join(src, 'run.sh'), '#!/bin/sh\necho cli-ok\n', { mode: 0o755 });
    const put = await cli(['files', 'put', sandbox.id, src, '/root/proj']);
    expect(put.code, put.stderr).toBe(0);
    expect(put.stderr).toContain('2 files');
    expect((await sandbox.commands.run(['/root/proj/run.sh'])).stdout).toBe('cli-ok\n');
    const back = join(localDir, 'back');
    const get = await cli(['files', 'get', sandbox.id, '/root/proj', back]);
    expect(get.code, get.stderr).toBe(0);
    expect((await readFile(join(back, 'nested/deeper/data.bin'))).equals(bin)).toBe(true);
    expect((await stat(join(back, 'run.sh'))).mode & 0o777).toBe(0o755);
    const one = await cli(['files', 'put', sandbox.id, join(src, 'nested/deeper/data.bin'), '/root/one.bin']);
    expect(one.code, one.stderr).toBe(0);
    const out = await cli(['files', 'get', sandbox.id, '/root/one.bin']);
    expect(out.stdoutBytes.equals(bin)).toBe(true);
    expect((await cli(['files', 'chmod', sandbox.id, '700', '/root/one.bin'])).code).toBe(0);
    expect((await sandbox.files.stat('/root/one.bin')).mode).toBe(0o700);
    expect((await cli(['files', 'rm', sandbox.id, '/root/proj'])).code).not.toBe(0);
    expect((await cli(['files', 'rm', '-r', sandbox.id, '/root/proj'])).code).toBe(0);
    expect(await sandbox.files.exists('/root/proj')).toBe(false);
  });
});
