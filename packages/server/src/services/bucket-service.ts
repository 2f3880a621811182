import { HeadBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { type AddBucketRequestSchema, type Bucket, ErrorCode } from '@burrow/contract';
import type { z } from 'zod';
import type { BucketRecord, BucketStore } from '../store/bucket-store.js';
import { ApiError } from '../util/api-error.js';
import type { Clock } from '../util/clock.js';
import { newId } from '../util/ids.js';
import { classifyS3Error } from './s3-errors.js';

const CODE_OF = {
  snapshot_store_denied: ErrorCode.bucketDenied,
  snapshot_store_bucket_missing: ErrorCode.bucketMissing,
  snapshot_store_unavailable: ErrorCode.bucketUnavailable,
  snapshot_corrupt: ErrorCode.bucketChecksumMismatch,
} as const;

const HINTS: Partial<Record<ErrorCode, string>> = {
  bucket_denied:
    'the S3 service refused these credentials: check the access key and secret (`burrow buckets remove NAME`, then add it again) and that they may read and write the prefix',
  bucket_missing: 'the bucket does not exist at this endpoint: create it, or fix the name (`--bucket`)',
  bucket_unavailable: 'the endpoint did not answer: check the URL and that the S3 service is up, then retry',
  bucket_checksum_mismatch: 'an object changed or was damaged in transit; retry the sync',
};

/**
 * An AWS SDK (or network) error of a call to a tenant's bucket as an {@link ApiError} with a `bucket_*` code. The
 * message names the operation and the bucket's name, never its credentials.
 */
export function bucketError(what: string, error: unknown): ApiError {
  if (error instanceof ApiError) return error;
  const classified = classifyS3Error(what, error);
  const code = CODE_OF[classified.code];
  return new ApiError(code, classified.message, { hint: HINTS[code] ?? '', cause: error });
}

/** An S3 client for one record: its endpoint, region, credentials and addressing; checksums only where required. */
export function clientOf(record: BucketRecord): S3Client {
  return new S3Client({
    endpoint: record.endpoint,
    region: record.region,
    forcePathStyle: record.pathStyle,
    credentials: { accessKeyId: record.accessKeyId, secretAccessKey: record.secretAccessKey },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    maxAttempts: 2,
  });
}

/** What the API shows of a record: everything but the secret. */
export function bucketView(record: BucketRecord): Bucket {
  return {
    name: record.name,
    bucket: record.bucket,
    endpoint: record.endpoint,
    region: record.region,
    accessKeyId: record.accessKeyId,
    pathStyle: record.pathStyle,
    createdAt: record.createdAt,
  };
}

/** A tenant's named bucket credentials: checked against the service when added, held sealed, never shown. */
export class BucketService {
  constructor(private readonly deps: { store: BucketStore; clock: Clock }) {}

  /**
   * Check the credentials with `HeadBucket`, then keep them under `name`.
   * @throws ApiError `bucket_exists`, `bucket_denied`, `bucket_missing`, `bucket_unavailable` (nothing is kept)
   */
  async add(tenantId: string, input: z.output<typeof AddBucketRequestSchema>): Promise<Bucket> {
    if ((await this.deps.store.get(tenantId, input.name)) !== null) throw exists(input.name);
    const record: BucketRecord = {
      id: newId('bkt'),
      tenantId,
      name: input.name,
      bucket: input.bucket ?? input.name,
      endpoint: input.endpoint,
      region: input.region,
      accessKeyId: input.accessKeyId,
      secretAccessKey: input.secretAccessKey,
      pathStyle: input.pathStyle,
      createdAt: new Date(this.deps.clock.nowMs()).toISOString(),
    };
    const client = clientOf(record);
    try {
      await client.send(new HeadBucketCommand({ Bucket: record.bucket }));
    } catch (error) {
      // HeadBucket has no body: a 404 there is the bucket's own absence.
      const e = error as { $metadata?: { httpStatusCode?: number } };
      if (e.$metadata?.httpStatusCode === 404) {
        throw new ApiError(ErrorCode.bucketMissing, `bucket ${record.bucket} does not exist at ${record.endpoint}`, {
          hint: HINTS.bucket_missing ?? '',
        });
      }
      throw bucketError(`checking bucket ${record.bucket} at ${record.endpoint}`, error);
    } finally {
      client.destroy();
    }
    if (!(await this.deps.store.insert(record))) throw exists(input.name);
    return bucketView(record);
  }

  /** The tenant's buckets, by name (no secrets). */
  async list(tenantId: string): Promise<Bucket[]> {
    return (await this.deps.store.list(tenantId)).map(bucketView);
  }

  /** @throws ApiError `bucket_not_found` */
  async remove(tenantId: string, name: string): Promise<void> {
    if (!(await this.deps.store.remove(tenantId, name))) throw notFound(name);
  }

  /**
   * The record of `name`, secret included, for a sync of this process (never for an answer).
   * @throws ApiError `bucket_not_found`
   */
  async require(tenantId: string, name: string): Promise<BucketRecord> {
    const record = await this.deps.store.get(tenantId, name);
    if (record === null) throw notFound(name);
    return record;
  }
}

function notFound(name: string): ApiError {
  return new ApiError(ErrorCode.bucketNotFound, `no bucket credentials named ${name}`, {
    hint: 'list them with `burrow buckets list`; add them with `burrow buckets add NAME --endpoint URL ...`',
  });
}

function exists(name: string): ApiError {
  return new ApiError(ErrorCode.bucketExists, `bucket credentials named ${name} exist already`, {
    hint: 'pick another name, or remove the existing ones first (`burrow buckets remove NAME`)',
  });
}
