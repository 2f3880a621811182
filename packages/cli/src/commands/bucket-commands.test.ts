import { describe, expect, it } from 'vitest';
import { UsageError } from '../exit-codes.js';
import { parseBucketUrl } from './bucket-commands.js';

describe('parseBucketUrl', () => {
  it('splits s3://NAME/prefix, trimming slashes; the root is an empty prefix', () => {
    expect(parseBucketUrl('s3://art/run-1/out/')).toEqual({ bucket: 'art', prefix: 'run-1/out' });
    expect(parseBucketUrl('s3://art')).toEqual({ bucket: 'art', prefix: '' });
  });
  it('refuses what is not a bucket name URL', () => {
    for (const bad of ['art/run', 's3://', 's3://Art/x', 'https://art/x']) {
      expect(() => parseBucketUrl(bad)).toThrow(UsageError);
    }
  });
});
