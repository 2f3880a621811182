import { S3Client } from '@aws-sdk/client-s3';
import type { Logger } from 'pino';
import { S3BlobStore } from './s3-blob-store.js';
import { SnapshotStoreError } from './s3-errors.js';

/** Where `BURROW_SNAPSHOT_STORE=s3://bucket/prefix` points. */
export interface S3Location {
  bucket: string;
  /** Without leading or trailing slashes; '' for the bucket's root. */
  prefix: string;
}

/**
 * Parse an `s3://bucket[/prefix]` URL.
 * @throws RangeError when it is not one
 * @example
 * parseS3Url('s3://burrow/snapshots'); // { bucket: 'burrow', prefix: 'snapshots' }
 */
export function parseS3Url(url: string): S3Location {
  const match = /^s3:\/\/([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(\/.*)?$/.exec(url);
  if (match === null) {
    throw new RangeError(`BURROW_SNAPSHOT_STORE must look like s3://bucket/prefix, got ${url}`);
  }
  const prefix = (match[2] ?? '').replace(/^\/+|\/+$/g, '');
  if (prefix.split('/').some((p) => p === '.' || p === '..')) {
    throw new RangeError(`BURROW_SNAPSHOT_STORE's prefix may not hold . or .. segments: ${url}`);
  }
  return { bucket: match[1] as string, prefix };
}

/**
 * An S3 client configured from the standard AWS variables and files: the SDK reads AWS_REGION, AWS_PROFILE,
 * AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and ~/.aws itself; `endpoint` (AWS_ENDPOINT_URL) turns on path-style
 * addressing, which S3-compatible servers (Swift, MinIO) need. Checksums are sent only where S3 requires them:
 * the chunks carry their own sha256 in their names.
 */
export function createS3Client(options: { endpoint?: string | undefined; region?: string | undefined }): S3Client {
  return new S3Client({
    ...(options.region === undefined ? {} : { region: options.region }),
    ...(options.endpoint === undefined ? {} : { endpoint: options.endpoint, forcePathStyle: true }),
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    maxAttempts: 3,
  });
}

/** The S3 snapshot store's settings (from BURROW_SNAPSHOT_STORE and the AWS variables; see Config in main.ts). */
export interface SnapshotStoreConfig {
  location: S3Location;
  /** AWS_ENDPOINT_URL, or null for AWS itself. */
  endpoint: string | null;
  /** AWS_REGION, or null for the SDK's own resolution (AWS_PROFILE's region, else us-east-1). */
  region: string | null;
  /** Local cache size, MiB. @default 10_240 (10 GiB) */
  cacheMiB: number;
  /** Whether a snapshot answers only once its upload is done. @default false */
  durable: boolean;
}

/**
 * Open the S3 snapshot store: check the bucket, then resume the uploads a previous process left pending. A store
 * that does not answer is logged and used anyway (the cache serves, uploads retry); a refusal is not.
 * @throws SnapshotStoreError `snapshot_store_denied` or `snapshot_store_bucket_missing`: the settings are wrong
 */
export async function openS3SnapshotStore(
  config: SnapshotStoreConfig,
  options: { cacheDir: string; logger: Logger },
): Promise<S3BlobStore> {
  const store = new S3BlobStore({
    client: createS3Client({ endpoint: config.endpoint ?? undefined, region: config.region ?? undefined }),
    bucket: config.location.bucket,
    prefix: config.location.prefix,
    cacheDir: options.cacheDir,
    cacheLimitBytes: config.cacheMiB * 1024 * 1024,
    durable: config.durable,
    logger: options.logger,
  });
  try {
    await store.check();
  } catch (error) {
    if (!(error instanceof SnapshotStoreError)) throw error;
    if (error.code !== 'snapshot_store_unavailable') {
      throw new SnapshotStoreError(error.code, `${error.message}; ${error.hint}`, { cause: error });
    }
    options.logger.warn({ err: error }, 'the S3 snapshot store does not answer; snapshots upload once it does');
  }
  await store.resumePending();
  return store;
}
