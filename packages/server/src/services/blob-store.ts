import { randomBytes } from 'node:crypto';
import { mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';

/** Where a snapshot's upload to a remote store stands. */
export interface UploadStatus {
  /** `pending`: queued or uploading; `failed`: the last attempt failed and a retry is scheduled; `done`: stored. */
  state: 'pending' | 'done' | 'failed';
  /** Bytes still to send, as far as known (0 before the chunks are counted and once done). */
  bytesLeft: number;
  /** The last attempt's failure, with its stable code. */
  error: { code: string; message: string } | null;
}

/** What an orphan sweep of a remote store removed. */
export interface BlobSweepReport {
  refsRemoved: number;
  chunksRemoved: number;
}

/**
 * Where snapshot bytes live: one directory of files per key. {@link LocalDirBlobStore} keeps them in a local
 * directory; S3BlobStore (s3-blob-store.ts) stages and caches locally, uploads after `commit` and downloads in
 * `open`.
 */
export interface BlobStore {
  /** A new empty local directory to write a blob into before {@link commit}. */
  stage(key: string): Promise<string>;
  /** Make a staged directory durable under `key`. */
  commit(key: string, stagedDir: string): Promise<void>;
  /** A local directory holding the files of `key`. @throws Error when there is no such blob */
  open(key: string): Promise<string>;
  /** Remove a blob (and any staging leftovers of it). Idempotent. */
  delete(key: string): Promise<void>;
  /** Keys stored, for reaping blobs no row owns. */
  keys(): Promise<string[]>;
  /** The upload state of `key` in a remote store; absent or null for a local store. */
  uploadStatus?(key: string): UploadStatus | null;
  /** Remove remote objects no key owns once older than `graceMs` (a remote store only). */
  sweep?(nowMs: number, graceMs: number): Promise<BlobSweepReport>;
}

/** Keys are ids such as `snp_…`: no path separators or dots. */
function checkKey(key: string): void {
  if (!/^[a-z]{3}_[0-9a-z]{20}$/.test(key)) throw new Error(`not a blob key: ${key}`);
}

/**
 * A {@link BlobStore} in a local directory: `<root>/<key>/`, staged under `<root>/.staging/` on the same
 * filesystem so commit is a rename, and hard links from the sandbox's own image stay possible.
 */
export class LocalDirBlobStore implements BlobStore {
  constructor(private readonly root: string) {}

  async stage(key: string): Promise<string> {
    checkKey(key);
    const dir = join(this.root, '.staging', `${key}-${randomBytes(4).toString('hex')}`);
    await mkdir(join(this.root, '.staging'), { recursive: true });
    return dir;
  }

  async commit(key: string, stagedDir: string): Promise<void> {
    checkKey(key);
    await rename(stagedDir, join(this.root, key));
  }

  async open(key: string): Promise<string> {
    checkKey(key);
    const dir = join(this.root, key);
    const st = await stat(dir).catch(() => null);
    if (!st?.isDirectory()) throw new Error(`blob ${key} is missing`);
    return dir;
  }

  async delete(key: string): Promise<void> {
    checkKey(key);
    await rm(join(this.root, key), { recursive: true, force: true });
    for (const name of await readdir(join(this.root, '.staging')).catch(() => [] as string[])) {
      if (name.startsWith(`${key}-`)) await rm(join(this.root, '.staging', name), { recursive: true, force: true });
    }
  }

  async keys(): Promise<string[]> {
    const names = await readdir(this.root).catch(() => [] as string[]);
    return names.filter((n) => !n.startsWith('.'));
  }
}
