import { S3Client } from '@aws-sdk/client-s3';

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
    region: options.region ?? 'us-east-1',
    ...(options.endpoint === undefined ? {} : { endpoint: options.endpoint, forcePathStyle: true }),
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    maxAttempts: 3,
  });
}
