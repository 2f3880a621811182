/**
 * The S3 snapshot store's settings: `s3://` URLs, the BURROW_SNAPSHOT_* variables, and what a start does with a
 * bucket that refuses or does not answer (the refusal cases against the real S3 server, BURROW_TEST_S3_STORE).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBurrow, loadConfig } from '../main.js';
import { FakeDriver } from '../testing/fake-driver.js';
import { FakeTemplateBuilder } from '../testing/fake-template-builder.js';
import { testS3 } from '../testing/test-s3.js';
import { openS3SnapshotStore, parseS3Url, type SnapshotStoreConfig } from './s3-config.js';
import type { SnapshotStoreError } from './s3-errors.js';

describe('parseS3Url', () => {
  it.each([
    ['s3://burrow', { bucket: 'burrow', prefix: '' }],
    ['s3://burrow/', { bucket: 'burrow', prefix: '' }],
    ['s3://burrow/snapshots', { bucket: 'burrow', prefix: 'snapshots' }],
    ['s3://my.bucket-1/a/b/', { bucket: 'my.bucket-1', prefix: 'a/b' }],
  ])('%s', (url, expected) => {
    expect(parseS3Url(url)).toEqual(expected);
  });
  it.each([
    'burrow/snapshots',
    'http://burrow/x',
    's3://',
    's3://B/x',
    's3://ab/x',
    's3://burrow/../x',
    's3://burrow/a/./b',
  ])('refuses %s', (url) => {
    expect(() => parseS3Url(url)).toThrow(RangeError);
  });
});

describe('loadConfig snapshot store', () => {
  it('is off without BURROW_SNAPSHOT_STORE', () => {
    expect(loadConfig({}).snapshotStore).toBeNull();
  });
  it('reads the store, the AWS endpoint and region, the cache size and durability', () => {
    const config = loadConfig({
      BURROW_SNAPSHOT_STORE: 's3://bk1/p',
      AWS_ENDPOINT_URL: 'http://127.0.0.1:9000',
      AWS_REGION: 'eu-west-1',
      BURROW_SNAPSHOT_CACHE_MIB: '512',
      BURROW_SNAPSHOT_DURABLE: 's3',
    });
    expect(config.snapshotStore).toEqual({
      location: { bucket: 'bk1', prefix: 'p' },
      endpoint: 'http://127.0.0.1:9000',
      region: 'eu-west-1',
      cacheMiB: 512,
      durable: true,
    });
  });
  it('refuses a bad durability, a durable store without a store, and a bad cache size', () => {
    expect(() => loadConfig({ BURROW_SNAPSHOT_STORE: 's3://bk1', BURROW_SNAPSHOT_DURABLE: 'yes' })).toThrow(
      /BURROW_SNAPSHOT_DURABLE/,
    );
    expect(() => loadConfig({ BURROW_SNAPSHOT_DURABLE: 's3' })).toThrow(/needs BURROW_SNAPSHOT_STORE/);
    expect(() => loadConfig({ BURROW_SNAPSHOT_STORE: 's3://bk1', BURROW_SNAPSHOT_CACHE_MIB: '-1' })).toThrow(
      /BURROW_SNAPSHOT_CACHE_MIB/,
    );
  });
});

const s3 = testS3('config');

describe.skipIf(s3 === null)('openS3SnapshotStore on the real S3 server', () => {
  const at = s3 as NonNullable<typeof s3>;
  let cacheDir: string;
  const logger = pino({ level: 'silent' });
  beforeAll(async () => {
    cacheDir = await mkdtemp(join(tmpdir(), 'burrow-s3config-'));
  });
  afterAll(async () => {
    await rm(cacheDir, { recursive: true, force: true });
  });
  const config = (extra: Partial<SnapshotStoreConfig> = {}): SnapshotStoreConfig => ({
    location: { bucket: at.bucket, prefix: at.prefix },
    endpoint: at.endpoint,
    region: at.region,
    cacheMiB: 64,
    durable: false,
    ...extra,
  });

  it('opens a bucket that answers, and one whose endpoint is down (uploads wait for it)', async () => {
    const ok = await openS3SnapshotStore(config(), { cacheDir, logger });
    ok.close();
    const down = await openS3SnapshotStore(config({ endpoint: 'http://127.0.0.1:9' }), { cacheDir, logger });
    down.close();
  });

  it('refuses a missing bucket with snapshot_store_bucket_missing and a message saying what to do', async () => {
    const error = (await openS3SnapshotStore(config({ location: { bucket: 'no-such-bucket-burrow', prefix: '' } }), {
      cacheDir,
      logger,
    }).catch((e: unknown) => e)) as SnapshotStoreError;
    expect(error.code).toBe('snapshot_store_bucket_missing');
    expect(error.message).toMatch(/create it or fix the name/);
  });

  it('refuses wrong credentials with snapshot_store_denied', async () => {
    const saved = process.env.AWS_SECRET_ACCESS_KEY;
    process.env.AWS_SECRET_ACCESS_KEY = 'not-the-secret';
    try {
      const error = (await openS3SnapshotStore(config(), { cacheDir, logger }).catch(
        (e: unknown) => e,
      )) as SnapshotStoreError;
      expect(error.code).toBe('snapshot_store_denied');
    } finally {
      process.env.AWS_SECRET_ACCESS_KEY = saved;
    }
  });
});

describe('a server whose S3 endpoint is down (FakeDriver: no runtime in this test)', () => {
  it('starts, reconciles (the store pass reported as a failure) and takes snapshots locally with upload failed', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'burrow-s3down-'));
    const saved = { id: process.env.AWS_ACCESS_KEY_ID, secret: process.env.AWS_SECRET_ACCESS_KEY };
    process.env.AWS_ACCESS_KEY_ID ??= 'test:tester';
    process.env.AWS_SECRET_ACCESS_KEY ??= 'testing';
    const burrow = await createBurrow(
      loadConfig(
        {},
        {
          dataDir,
          snapshotStore: {
            location: { bucket: 'burrow', prefix: 'down' },
            endpoint: 'http://127.0.0.1:9',
            region: 'us-east-1',
            cacheMiB: 64,
            durable: false,
          },
        },
      ),
      {
        driver: new FakeDriver(join(dataDir, 'fake-sandboxes')),
        templateBuilder: new FakeTemplateBuilder(join(dataDir, 'fake-templates')),
        logger: pino({ level: 'silent' }),
        capacity: { cpuCount: () => 2, memoryMiB: () => 4096, freeDiskMiB: async () => 100_000 },
      },
    );
    try {
      const report = await burrow.reconciler.reconcileOnce();
      expect(report.failures.map((f) => f.id)).toContain('snapshot-store');
      await burrow.services.templates.ensureBase();
      const headers = { authorization: `Bearer ${await burrow.services.keys.ensureAdminKey()}` };
      const created = await burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers, payload: {} });
      expect(created.statusCode, created.body).toBe(201);
      const id = JSON.parse(created.body).id as string;
      const snap = await burrow.app.inject({
        method: 'POST',
        url: `/v1/sandboxes/${id}/snapshots`,
        headers,
        payload: { name: 'down-snap', memory: false },
      });
      expect(snap.statusCode, snap.body).toBe(201);
      await expect
        .poll(
          async () =>
            JSON.parse((await burrow.app.inject({ method: 'GET', url: '/v1/snapshots/down-snap', headers })).body)
              .upload,
          { timeout: 30_000 },
        )
        .toMatchObject({ state: 'failed', error: { code: 'snapshot_store_unavailable' } });
    } finally {
      await burrow.close();
      process.env.AWS_ACCESS_KEY_ID = saved.id;
      process.env.AWS_SECRET_ACCESS_KEY = saved.secret;
      if (saved.id === undefined) delete process.env.AWS_ACCESS_KEY_ID;
      if (saved.secret === undefined) delete process.env.AWS_SECRET_ACCESS_KEY;
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
