/**
 * Artifacts in the real S3 server (Swift s3api, BURROW_TEST_S3_STORE) with the real GvisorDriver: named bucket
 * credentials (checked when added, the secret never shown nor stored in the clear), refusals with stable codes
 * (wrong secret, missing bucket, endpoint down, unknown name), two-way sync with edits on both sides and a
 * conflict (newest wins, the older kept on both sides), a second sync that moves nothing, a 96 MiB file up
 * (multipart) and down byte-exact, a download whose bytes do not match its checksum refused with nothing written,
 * `fromBucket` filling a directory before the first command, and sync paths through a symlink to a host
 * directory or full of `..` staying inside the sandbox.
 */
import { createHash } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GetObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { GvisorDriver } from '@burrow/runtime-gvisor';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Burrow, createBurrow, loadConfig } from '../../packages/server/src/main.js';
import { GvisorTemplateBuilder } from '../../packages/server/src/node/gvisor-template-builder.js';
import { createS3Client } from '../../packages/server/src/services/s3-config.js';
import { emptyTestPrefix, testS3 } from '../../packages/server/src/testing/test-s3.js';

const TEMPLATES_DIR = '/var/tmp/burrow-test-templates';
const s3 = testS3('sync-real');
const BIG_BYTES = 96 * 1024 * 1024;

type Body = Record<string, unknown>;

describe.skipIf(s3 === null)('artifact sync with the real S3 server over the real GvisorDriver', () => {
  const at = s3 as NonNullable<typeof s3>;
  const secret = process.env.AWS_SECRET_ACCESS_KEY ?? '';
  let burrow: Burrow;
  let driver: GvisorDriver;
  let dataDir: string;
  let client: S3Client;
  let headers: Record<string, string>;
  const call = async (method: 'GET' | 'POST' | 'DELETE', url: string, payload?: object) => {
    const res = await burrow.app.inject({ method, url: `/v1${url}`, headers, ...(payload ? { payload } : {}) });
    return { status: res.statusCode, raw: res.body, body: res.body ? (JSON.parse(res.body) as Body) : {} };
  };
  const exec = async (id: string, cmd: string) => {
    const res = await call('POST', `/sandboxes/${id}/exec`, { cmd });
    expect(res.status, res.raw).toBe(200);
    return Buffer.from(String(res.body.stdout), 'base64').toString();
  };
  const code = (res: { body: Body }) => (res.body.error as { code?: string } | undefined)?.code;
  const credentials = (extra: object = {}) => ({
    name: 'art',
    bucket: at.bucket,
    endpoint: at.endpoint,
    region: at.region,
    accessKeyId: process.env.AWS_ACCESS_KEY_ID,
    secretAccessKey: secret,
    pathStyle: true,
    ...extra,
  });
  const getObject = async (key: string) => {
    const got = await client.send(new GetObjectCommand({ Bucket: at.bucket, Key: `${at.prefix}/${key}` }));
    return Buffer.from(await (got.Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray());
  };
  const putObject = (key: string, body: string | Buffer, metadata?: Record<string, string>) =>
    client.send(
      new PutObjectCommand({
        Bucket: at.bucket,
        Key: `${at.prefix}/${key}`,
        Body: body,
        ...(metadata ? { Metadata: metadata } : {}),
      }),
    );

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'burrow-sync-'));
    const logger = pino({ level: process.env.BURROW_TEST_LOG ?? 'silent' });
    driver = new GvisorDriver({ dataDir, logger });
    burrow = await createBurrow(loadConfig({}, { dataDir, templatesDir: TEMPLATES_DIR }), {
      driver,
      templateBuilder: new GvisorTemplateBuilder({ templatesDir: TEMPLATES_DIR }),
      logger,
    });
    await burrow.services.templates.ensureBase();
    const key = await burrow.services.keys.ensureAdminKey();
    headers = key ? { authorization: `Bearer ${key}` } : {};
    client = createS3Client({ endpoint: at.endpoint, region: at.region });
  }, 120_000);
  afterAll(async () => {
    for (const row of (await burrow?.store.sandboxes.listAcrossTenants()) ?? []) {
      await driver.delete(row.id).catch((e: unknown) => console.error(e));
    }
    await burrow?.close();
    client?.destroy();
    await rm(dataDir, { recursive: true, force: true });
    await emptyTestPrefix(at);
  });

  test('bucket credentials: checked when added, refusals with stable codes, the secret never shown or stored plain', async () => {
    const denied = await call('POST', '/buckets', credentials({ secretAccessKey: 'wrong-secret' }));
    expect([denied.status, code(denied)]).toEqual([502, 'bucket_denied']);
    const missing = await call('POST', '/buckets', credentials({ bucket: 'no-such-bucket-here' }));
    expect([missing.status, code(missing)]).toEqual([502, 'bucket_missing']);
    const down = await call('POST', '/buckets', credentials({ endpoint: 'http://127.0.0.1:9' }));
    expect([down.status, code(down)]).toEqual([503, 'bucket_unavailable']);
    expect((await call('GET', '/buckets')).body.items).toEqual([]);

    const added = await call('POST', '/buckets', credentials());
    expect(added.status, added.raw).toBe(201);
    expect(added.raw).not.toContain(secret);
    const again = await call('POST', '/buckets', credentials());
    expect([again.status, code(again)]).toEqual([409, 'bucket_exists']);
    const list = await call('GET', '/buckets');
    expect((list.body.items as Body[]).map((b) => b.name)).toEqual(['art']);
    expect(list.raw).not.toContain(secret);
    expect(list.raw).not.toContain('secretAccessKey');
    // At rest: the database file holds the sealed secret only.
    const db = await readFile(join(dataDir, 'burrow.db')).catch(() => Buffer.alloc(0));
    expect(db.length).toBeGreaterThan(0);
    expect(db.includes(Buffer.from(`"${secret}"`))).toBe(false);

    const created = await call('POST', '/sandboxes', { memoryMiB: 256, diskMiB: 512 });
    const id = created.body.id as string;
    const unknown = await call('POST', `/sandboxes/${id}/sync`, { bucket: 'nope', path: '/root', direction: 'up' });
    expect([unknown.status, code(unknown)]).toEqual([404, 'bucket_not_found']);
    const badPrefix = await call('POST', `/sandboxes/${id}/sync`, {
      bucket: 'art',
      prefix: '../other',
      path: '/root',
      direction: 'up',
    });
    expect([badPrefix.status, code(badPrefix)]).toEqual([400, 'invalid_request']);
    // The credentials never enter the sandbox: nothing of the secret in its environment or files.
    expect(await exec(id, `grep -rl -- ${JSON.stringify(secret)} /root /etc /tmp 2>/dev/null; env`)).not.toContain(
      secret,
    );
    await call('DELETE', `/sandboxes/${id}`);
  }, 120_000);

  test('two-way sync: edits on both sides and a conflict (newest wins, the older kept on both sides); the next sync moves nothing', async () => {
    const id = (await call('POST', '/sandboxes', { memoryMiB: 256, diskMiB: 512 })).body.id as string;
    const sync = (extra: object = {}) =>
      call('POST', `/sandboxes/${id}/sync`, {
        bucket: 'art',
        prefix: `${at.prefix}/two`,
        path: '/root/work',
        direction: 'both',
        ...extra,
      });
    await exec(
      id,
      'mkdir -p /root/work/sub && cd /root/work && echo a1 > a.txt && echo b1 > b.txt && echo e1 > sub/e.txt && ln -s /etc/passwd link',
    );
    const first = await sync();
    expect(first.status, first.raw).toBe(200);
    expect((first.body.uploaded as string[]).sort()).toEqual(['a.txt', 'b.txt', 'sub/e.txt']);
    expect(first.body.skipped).toEqual(['link']);
    expect((await getObject('two/sub/e.txt')).toString()).toBe('e1\n');

    // Sandbox side: a.txt edited, d.txt new, e.txt edited (older); bucket side: b.txt edited, c.txt new, e.txt
    // edited later (Swift's LastModified has whole seconds: the gap keeps the order unambiguous).
    await exec(id, 'cd /root/work && echo a2 > a.txt && echo d1 > d.txt && echo e-sandbox > sub/e.txt');
    await new Promise((r) => setTimeout(r, 2100));
    await putObject('two/b.txt', 'b2\n');
    await putObject('two/c.txt', 'c1\n');
    await putObject('two/sub/e.txt', 'e-bucket\n');
    const second = await sync();
    expect(second.status, second.raw).toBe(200);
    const conflicts = second.body.conflicts as { path: string; keptAs: string; winner: string }[];
    expect(conflicts).toHaveLength(1);
    expect(conflicts[0]).toMatchObject({ path: 'sub/e.txt', winner: 'bucket' });
    const keptAs = conflicts[0]?.keptAs as string;
    expect(keptAs).toMatch(/^sub\/e\.txt\.conflict-\d{8}T\d{6}Z$/);
    expect(await exec(id, 'cd /root/work && cat a.txt b.txt c.txt d.txt sub/e.txt')).toBe('a2\nb2\nc1\nd1\ne-bucket\n');
    expect(await exec(id, `cat /root/work/${keptAs}`)).toBe('e-sandbox\n');
    expect((await getObject('two/a.txt')).toString()).toBe('a2\n');
    expect((await getObject('two/d.txt')).toString()).toBe('d1\n');
    expect((await getObject(`two/${keptAs}`)).toString()).toBe('e-sandbox\n');

    const third = await sync();
    expect(third.status, third.raw).toBe(200);
    expect([third.body.uploaded, third.body.downloaded, third.body.conflicts]).toEqual([[], [], []]);

    // With delete: a file removed in the sandbox goes from the bucket too.
    await exec(id, 'rm /root/work/d.txt');
    const fourth = await sync({ delete: true });
    expect(fourth.body.deletedRemote).toEqual(['d.txt']);
    await expect(getObject('two/d.txt')).rejects.toThrow();
    await call('DELETE', `/sandboxes/${id}`);
  }, 180_000);

  test(`a ${BIG_BYTES / 1048576} MiB file goes up (multipart) and down byte-exact; a bad checksum writes nothing`, async () => {
    const id = (await call('POST', '/sandboxes', { memoryMiB: 256, diskMiB: 768 })).body.id as string;
    await exec(id, `mkdir -p /root/big && head -c ${BIG_BYTES} /dev/urandom > /root/big/blob`);
    const want = (await exec(id, 'sha256sum /root/big/blob')).split(' ')[0];
    const up = await call('POST', `/sandboxes/${id}/sync`, {
      bucket: 'art',
      prefix: `${at.prefix}/big`,
      path: '/root/big',
      direction: 'up',
    });
    expect(up.status, up.raw).toBe(200);
    expect(up.body.bytesUp).toBe(BIG_BYTES);
    const stored = await getObject('big/blob');
    expect(createHash('sha256').update(stored).digest('hex')).toBe(want);

    await exec(id, 'rm -rf /root/big');
    const down = await call('POST', `/sandboxes/${id}/sync`, {
      bucket: 'art',
      prefix: `${at.prefix}/big`,
      path: '/root/big',
      direction: 'down',
    });
    expect(down.status, down.raw).toBe(200);
    expect(down.body.downloaded).toEqual(['blob']);
    expect((await exec(id, 'sha256sum /root/big/blob')).split(' ')[0]).toBe(want);

    await putObject('bad/x.bin', 'these bytes', { 'burrow-sha256': '0'.repeat(64) });
    const bad = await call('POST', `/sandboxes/${id}/sync`, {
      bucket: 'art',
      prefix: `${at.prefix}/bad`,
      path: '/root/bad',
      direction: 'down',
    });
    expect([bad.status, code(bad)], bad.raw).toEqual([502, 'bucket_checksum_mismatch']);
    expect(await exec(id, 'ls -A /root/bad; ls -A /.burrow-tmp 2>/dev/null | wc -l')).toBe('0\n');
    await call('DELETE', `/sandboxes/${id}`);
  }, 240_000);

  test('fromBucket fills a directory before the first command; an unknown bucket creates nothing', async () => {
    await putObject('seed/data/one.txt', 'one\n');
    await putObject('seed/two.txt', 'two\n');
    const created = await call('POST', '/sandboxes', {
      memoryMiB: 256,
      diskMiB: 256,
      fromBucket: { bucket: 'art', prefix: `${at.prefix}/seed`, path: '/root/seed' },
    });
    expect(created.status, created.raw).toBe(201);
    const id = created.body.id as string;
    expect(await exec(id, 'cat /root/seed/data/one.txt /root/seed/two.txt')).toBe('one\ntwo\n');
    const before = (await burrow.store.sandboxes.listAcrossTenants()).length;
    const refused = await call('POST', '/sandboxes', {
      fromBucket: { bucket: 'nope', prefix: `${at.prefix}/seed`, path: '/root/seed' },
    });
    expect([refused.status, code(refused)]).toEqual([404, 'bucket_not_found']);
    expect((await burrow.store.sandboxes.listAcrossTenants()).length).toBe(before);

    // A symlink to a host path and a path full of `..` resolve inside the sandbox's root: the host directory the
    // link names stays empty, the files land in the sandbox's own directory of that name. (Under /var/tmp: the
    // sandbox's /tmp is memory the files API refuses.)
    const host = await mkdtemp('/var/tmp/burrow-sync-escape-');
    try {
      await exec(id, `ln -s ${host} /root/esc`);
      for (const path of ['/root/esc', `/root/../../../..${host}/deeper`]) {
        const res = await call('POST', `/sandboxes/${id}/sync`, {
          bucket: 'art',
          prefix: `${at.prefix}/seed`,
          path,
          direction: 'down',
        });
        expect(res.status, res.raw).toBe(200);
      }
      expect(await readdir(host)).toEqual([]);
      expect(await exec(id, `cat ${host}/two.txt ${host}/deeper/two.txt`)).toBe('two\ntwo\n');
    } finally {
      await rm(host, { recursive: true, force: true });
    }
    await call('DELETE', `/sandboxes/${id}`);
  }, 120_000);
});
