import { randomBytes } from 'node:crypto';
import { mkdir, open, readdir, readFile, rename, rm, stat, symlink, utimes, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import {
  DeleteObjectCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  type S3Client,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import type { Logger } from 'pino';
import { forEachLimited } from '../util/for-each-limited.js';
import { KeyedMutex } from '../util/keyed-mutex.js';
import type { BlobStore, BlobSweepReport, UploadStatus } from './blob-store.js';
import { classifyS3Error, isNotFound, SnapshotStoreError } from './s3-errors.js';
import {
  buildManifest,
  type ChunkSource,
  checkManifestPath,
  DEFAULT_CHUNK_BYTES,
  manifestSchema,
  readChunk,
  type SnapshotManifest,
  sha256Hex,
} from './snapshot-manifest.js';

/** Options of {@link S3BlobStore}. */
export interface S3BlobStoreOptions {
  client: S3Client;
  bucket: string;
  /** Key prefix inside the bucket, without a trailing slash ('' for the bucket's root). */
  prefix: string;
  /** Local cache and staging directory (same filesystem as the data dir, so the runtime may hard-link from it). */
  cacheDir: string;
  /** Cache size above which the least recently used uploaded snapshots are dropped, bytes. */
  cacheLimitBytes: number;
  /** Upload in {@link S3BlobStore.commit} before it returns (`BURROW_SNAPSHOT_DURABLE=s3`). @default false */
  durable?: boolean;
  /** @default {@link DEFAULT_CHUNK_BYTES} (8 MiB) */
  chunkBytes?: number;
  /** First retry delay of a failed background upload; doubles per attempt up to `retryMaxMs`. @default 1000 (1 s) */
  retryBaseMs?: number;
  /** @default 60_000 (1 minute) */
  retryMaxMs?: number;
  /** Chunk transfers in flight per snapshot. @default 4 */
  concurrency?: number;
  logger: Logger;
}

/** The local record of a snapshot's upload, kept beside the cache so a restart resumes it. */
interface UploadRecord {
  state: UploadStatus['state'];
  bytesTotal: number;
  bytesLeft: number;
  attempts: number;
  error: { code: string; message: string } | null;
}

/** A cached snapshot is kept at least this long after its last use, so a restore reading it is never cut short. */
const CACHE_MIN_IDLE_MS = 60_000;

/** S3's smallest multipart part, bytes (lib-storage refuses a smaller `partSize`). */
const MIN_PART_BYTES = 5 * 1024 * 1024;

/** The body of a reference object (a Uint8Array, not a string: the SDK sends it with a known length). */
const EMPTY = new Uint8Array();

/**
 * A {@link BlobStore} in S3 (any S3-compatible service) with a local LRU cache.
 *
 * Layout under `prefix`: `chunks/<sha256>` (content-addressed pieces of the snapshot's files, see
 * {@link DEFAULT_CHUNK_BYTES}), `manifests/<key>.json` (the files and their chunk lists) and `refs/<sha256>/<key>`
 * (an empty object per snapshot using a chunk: the chunk's reference count). A chunk is uploaded only when a HEAD
 * says it is absent, so a lineage's unchanged pages go up once. The database row stays the commit point: the
 * manifest goes up last, and objects no row owns are reaped by the sweep after a grace period.
 *
 * Commit moves the staged dir into the cache and uploads in the background (state in `<cacheDir>/.state/`,
 * resumed by {@link resumePending} after a restart, retried with backoff), or inline when `durable`. Open
 * serves the cache, else downloads and checks every chunk's sha256.
 */
export class S3BlobStore implements BlobStore {
  private readonly chunkBytes: number;
  private readonly chunkLocks = new KeyedMutex();
  private readonly status = new Map<string, UploadRecord>();
  private readonly queued = new Set<string>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private readonly running = new Map<string, Promise<void>>();
  private readonly cancelled = new Set<string>();
  private closed = false;
  private zeroChunk: string | null = null;

  constructor(private readonly o: S3BlobStoreOptions) {
    this.chunkBytes = o.chunkBytes ?? DEFAULT_CHUNK_BYTES;
  }

  /**
   * Check that the bucket answers with these credentials.
   * @throws SnapshotStoreError `snapshot_store_bucket_missing`, `snapshot_store_denied`, `snapshot_store_unavailable`
   */
  async check(): Promise<void> {
    try {
      await this.o.client.send(new HeadBucketCommand({ Bucket: this.o.bucket }));
    } catch (error) {
      // HeadBucket answers a bare 404 without the NoSuchBucket name.
      if (isNotFound(error)) {
        throw classifyS3Error(`bucket ${this.o.bucket}`, Object.assign(error as Error, { name: 'NoSuchBucket' }));
      }
      throw classifyS3Error(`bucket ${this.o.bucket}`, error);
    }
  }

  async stage(key: string): Promise<string> {
    checkKey(key);
    await mkdir(join(this.o.cacheDir, '.staging'), { recursive: true });
    return join(this.o.cacheDir, '.staging', `${key}-${randomBytes(4).toString('hex')}`);
  }

  async commit(key: string, stagedDir: string): Promise<void> {
    checkKey(key);
    await mkdir(join(this.o.cacheDir, '.state'), { recursive: true });
    await this.writeRecord(key, { state: 'pending', bytesTotal: 0, bytesLeft: 0, attempts: 0, error: null });
    await rename(stagedDir, this.cached(key));
    if (this.o.durable === true) {
      try {
        await this.upload(key);
      } catch (error) {
        await this.delete(key).catch(() => undefined);
        throw classifyS3Error(`uploading snapshot ${key}`, error);
      }
      await this.evict(key);
      return;
    }
    this.enqueue(key);
  }

  async open(key: string): Promise<string> {
    checkKey(key);
    const dir = this.cached(key);
    if ((await stat(dir).catch(() => null))?.isDirectory() === true) {
      const now = new Date();
      await utimes(dir, now, now).catch(() => undefined);
      return dir;
    }
    const manifest = await this.getManifest(key);
    const staged = await this.stage(key);
    try {
      await this.download(manifest, staged);
      await rename(staged, dir);
    } catch (error) {
      await rm(staged, { recursive: true, force: true });
      throw error;
    }
    // Downloaded, so stored: the record says so on this machine too.
    await mkdir(join(this.o.cacheDir, '.state'), { recursive: true });
    await this.writeRecord(key, { state: 'done', bytesTotal: 0, bytesLeft: 0, attempts: 0, error: null });
    await writeFile(join(this.o.cacheDir, '.state', `${key}.manifest.json`), JSON.stringify(manifest));
    await this.evict(key);
    return dir;
  }

  /**
   * Remove the local copy at once, then the manifest and this snapshot's chunk references; a chunk no other
   * snapshot references goes too. An S3 failure is logged, not thrown: the row is gone, and the sweep removes what
   * is left once S3 answers.
   */
  async delete(key: string): Promise<void> {
    checkKey(key);
    this.cancelled.add(key);
    clearTimeout(this.timers.get(key));
    this.timers.delete(key);
    this.queued.delete(key);
    await this.running.get(key)?.catch(() => undefined);
    const local = await readFile(join(this.o.cacheDir, '.state', `${key}.manifest.json`), 'utf8').catch(() => null);
    await rm(this.cached(key), { recursive: true, force: true });
    for (const name of await readdir(join(this.o.cacheDir, '.staging')).catch(() => [] as string[])) {
      if (name.startsWith(`${key}-`))
        await rm(join(this.o.cacheDir, '.staging', name), { recursive: true, force: true });
    }
    try {
      const manifest =
        local !== null ? manifestSchema.parse(JSON.parse(local)) : await this.getManifest(key).catch(() => null);
      await this.deleteObject(`manifests/${key}.json`);
      for (const hash of new Set(manifest === null ? [] : chunksOf(manifest))) await this.unref(hash, key);
    } catch (error) {
      this.o.logger.warn({ err: error, key }, 'snapshot objects stay in S3 until the orphan sweep removes them');
    } finally {
      await rm(join(this.o.cacheDir, '.state', `${key}.json`), { force: true });
      await rm(join(this.o.cacheDir, '.state', `${key}.manifest.json`), { force: true });
      this.status.delete(key);
      this.cancelled.delete(key);
    }
  }

  /** Keys with a manifest in S3, plus those only in the local cache (their upload not done). */
  async keys(): Promise<string[]> {
    const keys = new Set(await this.localKeys());
    for (const object of await this.list('manifests/')) {
      const name = object.key.slice('manifests/'.length);
      if (name.endsWith('.json')) keys.add(name.slice(0, -'.json'.length));
    }
    return [...keys];
  }

  uploadStatus(key: string): UploadStatus | null {
    const r = this.status.get(key);
    if (r === undefined) return null;
    return { state: r.state, bytesLeft: r.bytesLeft, error: r.error };
  }

  /**
   * Read upload records a previous process left and start the uploads they name (after a restart). Staging
   * directories a killed process left (a snapshot or a download cut short) go first: one server owns the cache.
   */
  async resumePending(): Promise<void> {
    await rm(join(this.o.cacheDir, '.staging'), { recursive: true, force: true });
    for (const key of await this.localKeys()) {
      const raw = await readFile(join(this.o.cacheDir, '.state', `${key}.json`), 'utf8').catch(() => null);
      if (raw === null) continue;
      const record = JSON.parse(raw) as UploadRecord;
      this.status.set(key, record);
      if (record.state !== 'done') this.enqueue(key);
    }
  }

  /** Resolves once no background upload is queued, running or waiting for a retry. */
  async idle(): Promise<void> {
    while (this.running.size > 0 || this.queued.size > 0 || this.timers.size > 0) {
      await Promise.all([...this.running.values()].map((p) => p.catch(() => undefined)));
      if (this.running.size === 0 && (this.queued.size > 0 || this.timers.size > 0)) {
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  }

  /** Stop background work: no new attempt starts; one in flight finishes or fails on its own. */
  close(): void {
    this.closed = true;
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
  }

  /**
   * Remove chunk references whose snapshot has no manifest and no local copy, and chunks no reference names, when
   * the object is older than `graceMs` (a commit in flight writes references before its manifest).
   */
  async sweep(nowMs: number, graceMs: number): Promise<BlobSweepReport> {
    const report: BlobSweepReport = { refsRemoved: 0, chunksRemoved: 0 };
    const live = new Set(await this.keys());
    const old = (at: Date | undefined) => at !== undefined && nowMs - at.getTime() >= graceMs;
    const referenced = new Set<string>();
    for (const ref of await this.list('refs/')) {
      const [, hash, key] = ref.key.split('/');
      if (hash === undefined || key === undefined) continue;
      if (live.has(key) || !old(ref.lastModified)) {
        referenced.add(hash);
        continue;
      }
      await this.deleteObject(ref.key);
      report.refsRemoved += 1;
    }
    for (const chunk of await this.list('chunks/')) {
      const hash = chunk.key.slice('chunks/'.length);
      if (referenced.has(hash) || !old(chunk.lastModified)) continue;
      await this.chunkLocks.run(hash, async () => {
        if ((await this.list(`refs/${hash}/`, 1)).length > 0) return;
        await this.deleteObject(chunk.key);
        report.chunksRemoved += 1;
      });
    }
    return report;
  }

  private enqueue(key: string): void {
    if (this.closed) return;
    this.queued.add(key);
    void this.drain();
  }

  /** One upload at a time: the bandwidth goes to the oldest pause first. */
  private async drain(): Promise<void> {
    if (this.running.size > 0) return;
    const key = this.queued.values().next().value;
    if (key === undefined) return;
    this.queued.delete(key);
    const attempt = this.upload(key).then(
      async () => {
        this.running.delete(key);
        await this.evict(key).catch(() => undefined);
      },
      async (error: unknown) => {
        this.running.delete(key);
        if (this.cancelled.has(key)) return;
        const failure = classifyS3Error(`uploading snapshot ${key}`, error);
        const record = this.status.get(key);
        const attempts = (record?.attempts ?? 0) + 1;
        await this.writeRecord(key, {
          state: 'failed',
          bytesTotal: record?.bytesTotal ?? 0,
          bytesLeft: record?.bytesLeft ?? 0,
          attempts,
          error: { code: failure.code, message: failure.message },
        }).catch(() => undefined);
        const delayMs = Math.min(this.o.retryMaxMs ?? 60_000, (this.o.retryBaseMs ?? 1000) * 2 ** (attempts - 1));
        this.o.logger.warn({ key, err: failure, attempts, delayMs }, 'snapshot upload failed; retrying');
        if (this.closed) return;
        this.timers.set(
          key,
          setTimeout(() => {
            this.timers.delete(key);
            this.enqueue(key);
          }, delayMs),
        );
      },
    );
    this.running.set(key, attempt);
    await attempt.catch(() => undefined);
    void this.drain();
  }

  /** Upload `key` from the cache: references, absent chunks, then the manifest. Safe to repeat. */
  private async upload(key: string): Promise<void> {
    const dir = this.cached(key);
    const { manifest, sources } = await buildManifest(key, dir, this.chunkBytes);
    await writeFile(join(this.o.cacheDir, '.state', `${key}.manifest.json`), JSON.stringify(manifest));
    const prior = this.status.get(key);
    let bytesLeft = [...sources.values()].reduce((n, s) => n + s.sizeBytes, 0);
    const record: UploadRecord = {
      state: 'pending',
      bytesTotal: bytesLeft,
      bytesLeft,
      attempts: prior?.attempts ?? 0,
      error: prior?.error ?? null,
    };
    await this.writeRecord(key, record);
    await forEachLimited([...sources], this.o.concurrency ?? 4, async ([hash, source]) => {
      if (this.cancelled.has(key)) throw new Error(`snapshot ${key} was deleted during its upload`);
      await this.putChunk(hash, key, source);
      bytesLeft -= source.sizeBytes;
      this.status.set(key, { ...record, bytesLeft });
    });
    if (this.cancelled.has(key)) throw new Error(`snapshot ${key} was deleted during its upload`);
    await this.o.client.send(
      new PutObjectCommand({
        Bucket: this.o.bucket,
        Key: this.full(`manifests/${key}.json`),
        Body: JSON.stringify(manifest),
        ContentType: 'application/json',
      }),
    );
    await this.writeRecord(key, { ...record, state: 'done', bytesLeft: 0, error: null });
  }

  /**
   * Write this snapshot's reference to the chunk and upload the chunk if S3 lacks it, under the chunk's lock (an
   * unref in this process never sees it unreferenced in between; the sweep spares objects younger than its grace).
   * The chunk goes up in one PUT: lib-storage sends a body that fits one part without multipart.
   */
  private async putChunk(hash: string, key: string, source: ChunkSource): Promise<void> {
    await this.chunkLocks.run(hash, async () => {
      const [, present] = await Promise.all([
        this.o.client.send(
          new PutObjectCommand({ Bucket: this.o.bucket, Key: this.full(`refs/${hash}/${key}`), Body: EMPTY }),
        ),
        this.o.client.send(new HeadObjectCommand({ Bucket: this.o.bucket, Key: this.full(`chunks/${hash}`) })).then(
          () => true,
          (error: unknown) => {
            if (isNotFound(error)) return false;
            throw error;
          },
        ),
      ]);
      if (present) return;
      const body = await readChunk(source);
      await new Upload({
        client: this.o.client,
        partSize: Math.max(MIN_PART_BYTES, body.length),
        params: { Bucket: this.o.bucket, Key: this.full(`chunks/${hash}`), Body: body },
      }).done();
    });
  }

  private async unref(hash: string, key: string): Promise<void> {
    await this.chunkLocks.run(hash, async () => {
      await this.deleteObject(`refs/${hash}/${key}`);
      if ((await this.list(`refs/${hash}/`, 1)).length === 0) await this.deleteObject(`chunks/${hash}`);
    });
  }

  private async getManifest(key: string): Promise<SnapshotManifest> {
    let text: string;
    try {
      const got = await this.o.client.send(
        new GetObjectCommand({ Bucket: this.o.bucket, Key: this.full(`manifests/${key}.json`) }),
      );
      text = (await got.Body?.transformToString()) ?? '';
    } catch (error) {
      if (isNotFound(error) && (error as { name?: string }).name !== 'NoSuchBucket') {
        throw new SnapshotStoreError('snapshot_corrupt', `snapshot ${key} has no manifest in the S3 store`, {
          cause: error,
        });
      }
      throw classifyS3Error(`reading the manifest of snapshot ${key}`, error);
    }
    try {
      const manifest = manifestSchema.parse(JSON.parse(text));
      if (manifest.key !== key) throw new Error(`it names ${manifest.key}`);
      return manifest;
    } catch (error) {
      throw new SnapshotStoreError('snapshot_corrupt', `the manifest of snapshot ${key} is not valid`, {
        cause: error,
      });
    }
  }

  /** Write the manifest's files under `dir`; every chunk's sha256 is checked before its bytes are written. */
  private async download(manifest: SnapshotManifest, dir: string): Promise<void> {
    await mkdir(dir, { recursive: true });
    for (const entry of manifest.entries) {
      checkManifestPath(entry.path);
      const path = join(dir, entry.path);
      if (entry.type === 'dir') await mkdir(path, { recursive: true, mode: entry.mode });
      else if (entry.type === 'symlink') {
        await mkdir(dirname(path), { recursive: true });
        await symlink(entry.target, path);
      } else {
        await mkdir(dirname(path), { recursive: true });
        const handle = await open(path, 'w', entry.mode);
        try {
          // Size first: all-zero chunks are left as holes, keeping a sparse disk image sparse.
          await handle.truncate(entry.sizeBytes);
          const zero = this.zeroHash(manifest.chunkBytes);
          await forEachLimited(
            entry.chunks.map((hash, i) => [hash, i] as const),
            this.o.concurrency ?? 4,
            async ([hash, i]) => {
              const length = Math.min(manifest.chunkBytes, entry.sizeBytes - i * manifest.chunkBytes);
              if (hash === zero && length === manifest.chunkBytes) return;
              const bytes = await this.getChunk(manifest.key, hash);
              if (bytes.length !== length) {
                throw new SnapshotStoreError(
                  'snapshot_corrupt',
                  `chunk ${hash} of snapshot ${manifest.key} has ${bytes.length} bytes, the manifest says ${length}`,
                );
              }
              await handle.write(bytes, 0, length, i * manifest.chunkBytes);
            },
          );
        } finally {
          await handle.close();
        }
      }
    }
  }

  private async getChunk(key: string, hash: string): Promise<Uint8Array> {
    let bytes: Uint8Array;
    try {
      const got = await this.o.client.send(
        new GetObjectCommand({ Bucket: this.o.bucket, Key: this.full(`chunks/${hash}`) }),
      );
      bytes = (await got.Body?.transformToByteArray()) ?? new Uint8Array();
    } catch (error) {
      if (isNotFound(error) && (error as { name?: string }).name !== 'NoSuchBucket') {
        throw new SnapshotStoreError('snapshot_corrupt', `chunk ${hash} of snapshot ${key} is missing from S3`, {
          cause: error,
        });
      }
      throw classifyS3Error(`downloading chunk ${hash} of snapshot ${key}`, error);
    }
    if (sha256Hex(bytes) !== hash) {
      throw new SnapshotStoreError('snapshot_corrupt', `chunk ${hash} of snapshot ${key} does not match its sha256`);
    }
    return bytes;
  }

  private zeroHash(chunkBytes: number): string {
    if (chunkBytes !== this.chunkBytes) return sha256Hex(new Uint8Array(chunkBytes));
    this.zeroChunk ??= sha256Hex(new Uint8Array(chunkBytes));
    return this.zeroChunk;
  }

  /**
   * Drop least recently used cached snapshots until the cache fits its limit. Never `keep`, one whose upload is
   * not done, or one used in the last {@link CACHE_MIN_IDLE_MS}.
   */
  private async evict(keep: string): Promise<void> {
    const entries: Array<{ key: string; usedMs: number; sizeBytes: number }> = [];
    for (const key of await this.localKeys()) {
      const st = await stat(this.cached(key)).catch(() => null);
      if (st === null) continue;
      entries.push({ key, usedMs: st.mtimeMs, sizeBytes: await duBytes(this.cached(key)) });
    }
    let total = entries.reduce((n, e) => n + e.sizeBytes, 0);
    const nowMs = Date.now();
    for (const e of entries.sort((a, b) => a.usedMs - b.usedMs)) {
      if (total <= this.o.cacheLimitBytes) return;
      if (e.key === keep || nowMs - e.usedMs < CACHE_MIN_IDLE_MS) continue;
      const state = this.status.get(e.key)?.state;
      if (state !== undefined && state !== 'done') continue;
      await rm(this.cached(e.key), { recursive: true, force: true });
      total -= e.sizeBytes;
    }
  }

  private async localKeys(): Promise<string[]> {
    const names = await readdir(this.o.cacheDir).catch(() => [] as string[]);
    const state = await readdir(join(this.o.cacheDir, '.state')).catch(() => [] as string[]);
    const keys = new Set(names.filter((n) => !n.startsWith('.')));
    for (const n of state) if (n.endsWith('.json') && !n.endsWith('.manifest.json')) keys.add(n.slice(0, -5));
    return [...keys];
  }

  private async writeRecord(key: string, record: UploadRecord): Promise<void> {
    this.status.set(key, record);
    const path = join(this.o.cacheDir, '.state', `${key}.json`);
    await writeFile(`${path}.tmp`, JSON.stringify(record));
    await rename(`${path}.tmp`, path);
  }

  private async list(under: string, max?: number): Promise<Array<{ key: string; lastModified?: Date }>> {
    const out: Array<{ key: string; lastModified?: Date }> = [];
    let token: string | undefined;
    do {
      const page = await this.o.client
        .send(
          new ListObjectsV2Command({
            Bucket: this.o.bucket,
            Prefix: this.full(under),
            ...(token === undefined ? {} : { ContinuationToken: token }),
            ...(max === undefined ? {} : { MaxKeys: max }),
          }),
        )
        .catch((error: unknown) => {
          throw classifyS3Error(`listing ${this.full(under)}`, error);
        });
      for (const c of page.Contents ?? []) {
        if (c.Key === undefined) continue;
        out.push({
          key: c.Key.slice(this.full('').length),
          ...(c.LastModified === undefined ? {} : { lastModified: c.LastModified }),
        });
      }
      token = page.IsTruncated === true && max === undefined ? page.NextContinuationToken : undefined;
    } while (token !== undefined);
    return out;
  }

  private async deleteObject(relativeKey: string): Promise<void> {
    await this.o.client
      .send(new DeleteObjectCommand({ Bucket: this.o.bucket, Key: this.full(relativeKey) }))
      .catch((error: unknown) => {
        if (!isNotFound(error)) throw classifyS3Error(`deleting ${relativeKey}`, error);
      });
  }

  private full(relativeKey: string): string {
    return this.o.prefix === '' ? relativeKey : `${this.o.prefix}/${relativeKey}`;
  }

  private cached(key: string): string {
    return join(this.o.cacheDir, key);
  }
}

function checkKey(key: string): void {
  if (!/^[a-z]{3}_[0-9a-z]{20}$/.test(key)) throw new Error(`not a blob key: ${key}`);
}

function chunksOf(manifest: SnapshotManifest): string[] {
  return manifest.entries.flatMap((e) => (e.type === 'file' ? e.chunks : []));
}

/** Allocated bytes under `dir` (a sparse file counts what it holds). */
async function duBytes(dir: string): Promise<number> {
  let total = 0;
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    const path = join(dir, name);
    const st = await stat(path).catch(() => null);
    if (st === null) continue;
    total += st.isDirectory() ? await duBytes(path) : st.blocks * 512;
  }
  return total;
}
