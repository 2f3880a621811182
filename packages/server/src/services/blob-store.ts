import { randomBytes } from 'node:crypto';
import { mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * Where snapshot bytes live: one directory of files per key. The local dir store is the one implementation; an S3
 * store stages and uploads in `commit` and downloads in `open`.
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
