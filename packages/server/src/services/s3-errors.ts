import { ErrorCode } from '@burrow/contract';

/** The snapshot-store failures a caller can act on, each with a stable API code. */
export type SnapshotStoreErrorCode =
  | typeof ErrorCode.snapshotStoreUnavailable
  | typeof ErrorCode.snapshotStoreDenied
  | typeof ErrorCode.snapshotStoreBucketMissing
  | typeof ErrorCode.snapshotCorrupt;

const HINTS: Record<SnapshotStoreErrorCode, string> = {
  snapshot_store_unavailable:
    'the S3 endpoint did not answer or answered with a server error; check AWS_ENDPOINT_URL and that the S3 ' +
    'service is up, then retry',
  snapshot_store_denied:
    'S3 refused the credentials; check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) and that they ' +
    'may read and write the bucket and prefix of BURROW_SNAPSHOT_STORE',
  snapshot_store_bucket_missing:
    'the bucket named in BURROW_SNAPSHOT_STORE does not exist at AWS_ENDPOINT_URL; create it or fix the name',
  snapshot_corrupt:
    'a stored chunk of this snapshot is missing or its bytes do not match their sha256; the snapshot cannot be ' +
    'restored: restore another snapshot, or delete this one',
};

/** A snapshot-store failure with a stable code (mapped onto the API error of the same code). */
export class SnapshotStoreError extends Error {
  override readonly name = 'SnapshotStoreError';
  readonly hint: string;
  constructor(
    readonly code: SnapshotStoreErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.hint = HINTS[code];
  }
}

interface AwsLikeError {
  name?: string;
  code?: string;
  $metadata?: { httpStatusCode?: number };
}

/** The HTTP status an AWS SDK error carries, if any. */
export function httpStatusOf(error: unknown): number | undefined {
  return (error as AwsLikeError | null)?.$metadata?.httpStatusCode;
}

/** Whether an AWS SDK error says the object (or bucket, for `NoSuchBucket`) does not exist. */
export function isNotFound(error: unknown): boolean {
  const e = error as AwsLikeError | null;
  return e?.name === 'NotFound' || e?.name === 'NoSuchKey' || httpStatusOf(error) === 404;
}

/**
 * Classify an AWS SDK (or network) error as a {@link SnapshotStoreError}. `what` names the operation for the
 * message. A 404 of the bucket itself is `snapshot_store_bucket_missing`; 401/403 and signature errors are
 * `snapshot_store_denied`; everything else (refused connections, timeouts, 5xx) is `snapshot_store_unavailable`.
 */
export function classifyS3Error(what: string, error: unknown): SnapshotStoreError {
  if (error instanceof SnapshotStoreError) return error;
  const e = error as AwsLikeError | null;
  const status = httpStatusOf(error);
  const name = e?.name ?? '';
  const detail = `${name || 'error'}${status === undefined ? '' : ` (HTTP ${status})`}: ${(error as Error)?.message ?? String(error)}`;
  if (name === 'NoSuchBucket') {
    return new SnapshotStoreError(ErrorCode.snapshotStoreBucketMissing, `${what}: ${detail}`, { cause: error });
  }
  if (
    status === 401 ||
    status === 403 ||
    ['InvalidAccessKeyId', 'SignatureDoesNotMatch', 'AccessDenied', 'CredentialsProviderError'].includes(name)
  ) {
    return new SnapshotStoreError(ErrorCode.snapshotStoreDenied, `${what}: ${detail}`, { cause: error });
  }
  return new SnapshotStoreError(ErrorCode.snapshotStoreUnavailable, `${what}: ${detail}`, { cause: error });
}
