/**
 * A process that commits one snapshot into an S3BlobStore in the background and prints `mid` once part of its
 * upload is done, for the kill -9 test of s3-blob-store.test.ts. Arguments: a JSON object with endpoint,
 * region, bucket, prefix, cacheDir, key, chunkBytes and chunks (the file's size in chunks).
 */
import { randomBytes } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import pino from 'pino';
import { S3BlobStore } from '../services/s3-blob-store.js';
import { createS3Client } from '../services/s3-config.js';

const a = JSON.parse(process.argv[2] ?? '{}') as {
  endpoint: string;
  region: string;
  bucket: string;
  prefix: string;
  cacheDir: string;
  key: string;
  chunkBytes: number;
  chunks: number;
};
const store = new S3BlobStore({
  client: createS3Client({ endpoint: a.endpoint, region: a.region }),
  bucket: a.bucket,
  prefix: a.prefix,
  cacheDir: a.cacheDir,
  cacheLimitBytes: 1 << 30,
  chunkBytes: a.chunkBytes,
  concurrency: 1,
  logger: pino({ level: 'silent' }),
});
const dir = await store.stage(a.key);
await mkdir(dir, { recursive: true });
await writeFile(join(dir, 'pages.img'), randomBytes(a.chunkBytes * a.chunks));
await store.commit(a.key, dir);
const timer = setInterval(() => {
  const status = store.uploadStatus(a.key);
  if (status !== null && status.bytesLeft > 0 && status.bytesLeft <= a.chunkBytes * (a.chunks - 2)) {
    console.log('mid');
    clearInterval(timer);
  }
}, 2);
