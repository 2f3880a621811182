/**
 * S3BlobStore against the real S3 server (Swift s3api from scripts/start-s3.sh, BURROW_TEST_S3_STORE): round trip
 * through S3 with the cache dropped, chunk sharing, tampered and missing chunks refused, reference counts on
 * delete, background upload with retries across an outage, durable commit with S3 down, bad credentials and
 * bucket, kill -9 mid-upload then resume, and the orphan sweep.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, open, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DeleteObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TcpGate } from '../testing/tcp-gate.js';
import { emptyTestPrefix, testS3 } from '../testing/test-s3.js';
import { S3BlobStore, type S3BlobStoreOptions } from './s3-blob-store.js';
import { createS3Client } from './s3-config.js';
import type { SnapshotStoreError } from './s3-errors.js';

const s3 = testS3('blob-store');
const CHUNK = 1024 * 1024;
const logger = pino({ level: 'silent' });

describe.skipIf(s3 === null)('S3BlobStore on the real S3 server', () => {
  const at = s3 as NonNullable<typeof s3>;
  let root: string;
  let client: S3Client;
  let n = 0;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'burrow-s3store-'));
    client = createS3Client({ endpoint: at.endpoint, region: at.region });
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
    client.destroy();
    await emptyTestPrefix(at);
  });

  const key = () => `snp_${randomBytes(10).toString('hex')}`;
  const caches = new WeakMap<S3BlobStore, string>();
  const cacheOf = (s: S3BlobStore) => caches.get(s) as string;
  const store = (extra: Partial<S3BlobStoreOptions> = {}) => {
    const options: S3BlobStoreOptions = {
      client,
      bucket: at.bucket,
      prefix: at.prefix,
      cacheDir: join(root, `cache-${n++}`),
      cacheLimitBytes: 1 << 30,
      chunkBytes: CHUNK,
      retryBaseMs: 100,
      retryMaxMs: 400,
      logger,
      ...extra,
    };
    const made = new S3BlobStore(options);
    caches.set(made, options.cacheDir);
    return made;
  };
  const objects = async (under: string) => {
    const page = await client.send(new ListObjectsV2Command({ Bucket: at.bucket, Prefix: `${at.prefix}/${under}` }));
    return (page.Contents ?? []).map((c) => c.Key as string);
  };
  /** A staged snapshot: an image dir with a 3.5-chunk random file and a sparse 8-chunk disk. */
  const stageSample = async (s: S3BlobStore, k: string, pages = randomBytes(CHUNK * 3.5)) => {
    const dir = await s.stage(k);
    await mkdir(join(dir, 'image'), { recursive: true });
    await writeFile(join(dir, 'image', 'pages.img'), pages, { mode: 0o600 });
    const disk = await open(join(dir, 'disk.img'), 'w');
    await disk.truncate(8 * CHUNK);
    await disk.write(Buffer.from('superblock'), 0, 10, 2 * CHUNK);
    await disk.close();
    await writeFile(join(dir, 'manifest.json'), JSON.stringify({ k }));
    return { dir, pages };
  };
  const code = async (p: Promise<unknown>) =>
    p.then(
      () => 'resolved',
      (e: SnapshotStoreError) => e.code ?? e.message,
    );

  it('restores a committed snapshot from S3 with the cache dropped: bytes, modes and holes intact', async () => {
    const s = store({ durable: true });
    const k = key();
    const { dir: staged, pages } = await stageSample(s, k);
    await s.commit(k, staged);
    expect(s.uploadStatus(k)?.state).toBe('done');
    const fresh = store();
    const dir = await fresh.open(k);
    expect(dir.startsWith(join(root, `cache-${n - 1}`))).toBe(true); // the fresh store's own cache
    expect((await readFile(join(dir, 'image', 'pages.img'))).equals(pages)).toBe(true);
    expect((await stat(join(dir, 'image', 'pages.img'))).mode & 0o777).toBe(0o600);
    const disk = await readFile(join(dir, 'disk.img'));
    expect(disk.length).toBe(8 * CHUNK);
    expect(disk.subarray(2 * CHUNK, 2 * CHUNK + 10).toString()).toBe('superblock');
    // The all-zero chunks stay holes: the sparse disk is not written out densely.
    expect((await stat(join(dir, 'disk.img'))).blocks * 512).toBeLessThan(2 * CHUNK);
    expect(await fresh.keys()).toContain(k);
    // The machine that downloaded it knows it is stored, also after a restart.
    expect(fresh.uploadStatus(k)?.state).toBe('done');
    const restarted = store({ cacheDir: cacheOf(fresh) });
    await restarted.resumePending();
    expect(restarted.uploadStatus(k)?.state).toBe('done');
  });

  it('uploads a chunk shared by two snapshots once, and deleting one keeps what the other uses', async () => {
    const s = store({ durable: true });
    const a = key();
    const b = key();
    const shared = randomBytes(CHUNK * 3.5);
    const before = (await objects('chunks/')).length;
    const first = await stageSample(s, a, shared);
    await s.commit(a, first.dir);
    const afterFirst = (await objects('chunks/')).length;
    const changed = Buffer.from(shared);
    changed.fill(7, 0, 100); // one page of the first chunk differs
    const second = await stageSample(s, b, changed);
    await s.commit(b, second.dir);
    // disk.img and manifest.json chunks are new per snapshot only where their bytes differ (manifest.json does).
    expect((await objects('chunks/')).length - afterFirst).toBe(2);
    expect(afterFirst - before).toBeGreaterThanOrEqual(5);
    await s.delete(a);
    const fresh = store();
    expect((await readFile(join(await fresh.open(b), 'image', 'pages.img'))).equals(changed)).toBe(true);
    await expect(code(fresh.open(a))).resolves.toBe('snapshot_corrupt');
    await fresh.delete(b);
    expect(await objects(`manifests/${b}`)).toEqual([]);
  });

  it('refuses a tampered chunk and a missing one with snapshot_corrupt and leaves nothing in the cache', async () => {
    const s = store({ durable: true });
    const k = key();
    const { dir } = await stageSample(s, k);
    await s.commit(k, dir);
    const manifest = JSON.parse(await readFile(join(cacheOf(s), '.state', `${k}.manifest.json`), 'utf8'));
    const hash = manifest.entries.find((e: { path: string }) => e.path === 'image/pages.img').chunks[1] as string;
    await client.send(
      new PutObjectCommand({ Bucket: at.bucket, Key: `${at.prefix}/chunks/${hash}`, Body: randomBytes(CHUNK) }),
    );
    const fresh = store();
    await expect(code(fresh.open(k))).resolves.toBe('snapshot_corrupt');
    expect((await readdir(cacheOf(fresh))).filter((d) => !d.startsWith('.'))).toEqual([]);
    await client.send(new DeleteObjectCommand({ Bucket: at.bucket, Key: `${at.prefix}/chunks/${hash}` }));
    const err = await store()
      .open(k)
      .catch((e: Error) => e);
    expect((err as SnapshotStoreError).code).toBe('snapshot_corrupt');
    expect((err as Error).message).toMatch(/missing/);
  });

  it('uploads in the background, retries with backoff through an outage, and finishes when S3 is back', async () => {
    const gate = new TcpGate('127.0.0.1', Number(new URL(at.endpoint).port));
    const endpoint = await gate.open();
    const gated = createS3Client({ endpoint, region: at.region });
    try {
      const s = store({ client: gated });
      await gate.shut();
      const k = key();
      const { dir } = await stageSample(s, k);
      await s.commit(k, dir);
      expect(s.uploadStatus(k)?.state).toBe('pending');
      await expect.poll(() => s.uploadStatus(k)?.state, { timeout: 30_000 }).toBe('failed');
      expect(s.uploadStatus(k)?.error?.code).toBe('snapshot_store_unavailable');
      // The local copy serves a restore meanwhile.
      expect((await stat(join(await s.open(k), 'disk.img'))).size).toBe(8 * CHUNK);
      await gate.open();
      await expect.poll(() => s.uploadStatus(k)?.state, { timeout: 30_000 }).toBe('done');
      expect(s.uploadStatus(k)?.bytesLeft).toBe(0);
      expect((await stat(join(await store().open(k), 'disk.img'))).size).toBe(8 * CHUNK);
      s.close();
    } finally {
      await gate.shut();
      gated.destroy();
    }
  });

  it('a durable commit with S3 down fails with snapshot_store_unavailable and keeps nothing', async () => {
    const gate = new TcpGate('127.0.0.1', Number(new URL(at.endpoint).port));
    const endpoint = await gate.open();
    await gate.shut();
    const gated = createS3Client({ endpoint, region: at.region });
    try {
      const s = store({ client: gated, durable: true });
      const k = key();
      const { dir } = await stageSample(s, k);
      await expect(code(s.commit(k, dir))).resolves.toBe('snapshot_store_unavailable');
      expect((await readdir(cacheOf(s))).filter((d) => !d.startsWith('.'))).toEqual([]);
    } finally {
      gated.destroy();
    }
  });

  it('says which it is: wrong credentials, a missing bucket, an endpoint that is down', async () => {
    const wrong = new S3Client({
      region: at.region,
      endpoint: at.endpoint,
      forcePathStyle: true,
      credentials: { accessKeyId: 'test:tester', secretAccessKey: 'not-the-secret' },
      maxAttempts: 1,
    });
    await expect(code(store({ client: wrong }).check())).resolves.toBe('snapshot_store_denied');
    wrong.destroy();
    await expect(code(store({ bucket: `nobucket-${randomBytes(4).toString('hex')}` }).check())).resolves.toBe(
      'snapshot_store_bucket_missing',
    );
    const down = createS3Client({ endpoint: 'http://127.0.0.1:9', region: at.region });
    await expect(code(store({ client: down }).check())).resolves.toBe('snapshot_store_unavailable');
    down.destroy();
    await expect(code(store().check())).resolves.toBe('resolved');
  });

  it('resumes an upload after kill -9 of its process: all bytes arrive, no chunk twice', async () => {
    const cacheDir = join(root, 'killed');
    const k = key();
    const args = { ...at, cacheDir, key: k, chunkBytes: CHUNK, chunks: 16 };
    const child = spawn(
      join(import.meta.dirname, '../../../../node_modules/.bin/tsx'),
      [join(import.meta.dirname, '../testing/s3-upload-child.ts'), JSON.stringify(args)],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (d: Buffer) => d.toString().includes('mid') && resolve());
      child.on('exit', (c) => reject(new Error(`the uploader exited (${c}) before the middle of its upload`)));
    });
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    const state = JSON.parse(await readFile(join(cacheDir, '.state', `${k}.json`), 'utf8'));
    expect(state.state).toBe('pending');
    expect(await objects(`manifests/${k}`)).toEqual([]);
    const manifest = JSON.parse(await readFile(join(cacheDir, '.state', `${k}.manifest.json`), 'utf8'));
    const hashes: string[] = manifest.entries[0].chunks;
    const stored = async () => {
      const all = new Set(await objects('chunks/'));
      return hashes.filter((h) => all.has(`${at.prefix}/chunks/${h}`)).length;
    };
    const beforeRestart = await stored();
    expect(beforeRestart).toBeGreaterThan(0);
    expect(beforeRestart).toBeLessThan(16);
    const restarted = store({ cacheDir });
    await restarted.resumePending();
    await restarted.idle();
    expect(restarted.uploadStatus(k)?.state).toBe('done');
    expect(await stored()).toBe(16);
    const original = await readFile(join(cacheDir, k, 'pages.img'));
    const back = await readFile(join(await store().open(k), 'pages.img'));
    expect(back.equals(original)).toBe(true);
    expect((await objects('refs/')).filter((r) => r.endsWith(`/${k}`)).length).toBe(16);
  }, 120_000);

  it('the sweep removes references and chunks no snapshot owns, only after the grace period', async () => {
    const s = store();
    const orphanHash = randomBytes(32).toString('hex');
    const ghost = key();
    await client.send(new PutObjectCommand({ Bucket: at.bucket, Key: `${at.prefix}/chunks/${orphanHash}`, Body: 'x' }));
    await client.send(
      new PutObjectCommand({ Bucket: at.bucket, Key: `${at.prefix}/refs/${orphanHash}/${ghost}`, Body: '' }),
    );
    expect(await s.sweep(Date.now(), 3_600_000)).toEqual({ refsRemoved: 0, chunksRemoved: 0 });
    const report = await s.sweep(Date.now() + 7_200_000, 3_600_000);
    expect(report.refsRemoved).toBeGreaterThanOrEqual(1);
    expect(report.chunksRemoved).toBeGreaterThanOrEqual(1);
    expect(await objects(`chunks/${orphanHash}`)).toEqual([]);
  });
});
