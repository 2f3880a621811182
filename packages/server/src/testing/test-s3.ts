import { randomBytes } from 'node:crypto';
import { DeleteObjectCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { createS3Client, parseS3Url, type S3Location } from '../services/s3-config.js';

/** The real S3 server of the tests (scripts/start-s3.sh), and a fresh prefix in it for one test file. */
export interface TestS3 extends S3Location {
  endpoint: string;
  region: string;
}

/**
 * The S3 store the tests use: `BURROW_TEST_S3_STORE` (`s3://bucket/prefix`, set by `.ci/run` from
 * scripts/start-s3.sh) with the AWS_* variables. Under CI (CI=true) its absence throws, so the suite fails loudly;
 * elsewhere it returns null and says why once, and the caller skips.
 * @throws Error under CI when BURROW_TEST_S3_STORE or AWS_ENDPOINT_URL is unset
 */
export function testS3(label: string): TestS3 | null {
  const store = process.env.BURROW_TEST_S3_STORE;
  const endpoint = process.env.AWS_ENDPOINT_URL;
  if (store === undefined || endpoint === undefined) {
    const why =
      'BURROW_TEST_S3_STORE and AWS_* are unset: run `eval "$(bash scripts/start-s3.sh)"; ' +
      'export BURROW_TEST_S3_STORE=$BURROW_SNAPSHOT_STORE` first';
    if (process.env.CI === 'true') throw new Error(`the S3 tests need a server: ${why}`);
    console.warn(`skipping the S3 tests of ${label}: ${why}`);
    return null;
  }
  const at = parseS3Url(store);
  const prefix = [at.prefix, `t-${label}-${randomBytes(4).toString('hex')}`].filter((p) => p !== '').join('/');
  return { bucket: at.bucket, prefix, endpoint, region: process.env.AWS_REGION ?? 'us-east-1' };
}

/** Delete every object under the test's prefix (its afterAll), so test runs do not fill the local S3 server. */
export async function emptyTestPrefix(at: TestS3): Promise<void> {
  const client = createS3Client({ endpoint: at.endpoint, region: at.region });
  try {
    for (;;) {
      const page = await client.send(new ListObjectsV2Command({ Bucket: at.bucket, Prefix: `${at.prefix}/` }));
      const keys = (page.Contents ?? []).map((c) => c.Key as string);
      if (keys.length === 0) return;
      for (const key of keys) await client.send(new DeleteObjectCommand({ Bucket: at.bucket, Key: key }));
    }
  } finally {
    client.destroy();
  }
}
