/**
 * The S3 snapshot store (docs/s3.md) against the S3 server named by AWS_ENDPOINT_URL and BURROW_BENCH_S3_STORE
 * (`s3://bucket/prefix`; scripts/start-s3.sh gives a local Swift s3api):
 * - upload and download of a 64 MiB snapshot through S3BlobStore, each against a plain @aws-sdk upload
 *   (lib-storage) or GetObject of the same bytes as one object, alternating in the same run (ratio);
 * - bytes the store adds for the second memory snapshot of a sandbox against the first (chunk sharing);
 * - create from a memory snapshot with the cache dropped (download from S3) against the same with it cached.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DeleteObjectCommand, GetObjectCommand, ListObjectsV2Command, type S3Client } from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { Sandbox } from '@burrow/sdk';
import { createS3Client, loadConfig, parseS3Url, S3BlobStore, setup, startServer } from '@burrow/server';
import { pino } from 'pino';
import { type Summary, summarize, time } from './stats.js';

/** One bench row (same shape as run.ts's). */
export interface S3Row {
  metric: string;
  ours: Summary;
  raw: Summary | null;
  ratio: number | null;
  target: string;
}

const SIZE_BYTES = 64 * 1024 * 1024;

/**
 * Runs the S3 rows.
 * @returns the rows and notes (MB/s, dedup bytes), or null rows with a note saying why when no S3 store is set
 */
export async function benchS3(options: {
  iterations: number;
  /** One round of each row: checks the harness runs. */
  quick: boolean;
  workDir: string;
  templatesDir: string;
  log: (message: string) => void;
}): Promise<{ rows: S3Row[]; notes: string[] }> {
  const { log } = options;
  const url = process.env.BURROW_BENCH_S3_STORE ?? process.env.BURROW_TEST_S3_STORE;
  const endpoint = process.env.AWS_ENDPOINT_URL;
  if (url === undefined || endpoint === undefined) {
    return { rows: [], notes: ['S3 rows skipped: set AWS_* and BURROW_BENCH_S3_STORE (scripts/start-s3.sh).'] };
  }
  const at = parseS3Url(url);
  const prefix = [at.prefix, `bench-${randomBytes(4).toString('hex')}`].filter((p) => p !== '').join('/');
  const region = process.env.AWS_REGION ?? 'us-east-1';
  const client = createS3Client({ endpoint, region });
  const rows: S3Row[] = [];
  const notes: string[] = [];
  try {
    const n = options.quick ? 1 : Math.max(3, Math.min(options.iterations, 10));
    const transfer = await benchTransfer(client, at.bucket, prefix, options.workDir, n, log);
    rows.push(transfer.upload, transfer.download);
    const mbps = (s: Summary) => (SIZE_BYTES / 1e6 / (s.p50 / 1000)).toFixed(1);
    notes.push(
      `S3 transfer of 64 MiB at p50: store upload ${mbps(transfer.upload.ours)} MB/s vs plain SDK ` +
        `${mbps(transfer.upload.raw as Summary)} MB/s; store download ${mbps(transfer.download.ours)} MB/s vs ` +
        `plain SDK ${mbps(transfer.download.raw as Summary)} MB/s (${endpoint}).`,
    );
    const lineage = await benchLineage(
      { bucket: at.bucket, prefix: `${prefix}/server`, endpoint, region },
      client,
      options,
      n,
    );
    rows.push(lineage.restore);
    notes.push(
      `S3 chunk sharing: the first memory snapshot of a sandbox added ${(lineage.firstBytes / 1e6).toFixed(1)} MB ` +
        `of chunks, the second (after a small change) ${(lineage.secondBytes / 1e6).toFixed(1)} MB.`,
    );
  } finally {
    await emptyPrefix(client, at.bucket, prefix).catch(() => undefined);
    client.destroy();
  }
  return { rows, notes };
}

async function benchTransfer(
  client: S3Client,
  bucket: string,
  prefix: string,
  workDir: string,
  n: number,
  log: (message: string) => void,
): Promise<{ upload: S3Row; download: S3Row }> {
  const up = { ours: [] as number[], raw: [] as number[] };
  const down = { ours: [] as number[], raw: [] as number[] };
  for (let i = 0; i < n; i++) {
    log(`s3 transfer ${i + 1}/${n}`);
    // Fresh bytes and a fresh store prefix per round: nothing is shared with an earlier round.
    const bytes = randomBytes(SIZE_BYTES);
    const store = new S3BlobStore({
      client,
      bucket,
      prefix: `${prefix}/t${i}`,
      cacheDir: join(workDir, `s3-cache-${i}`),
      cacheLimitBytes: 1 << 30,
      durable: true,
      logger: pino({ level: 'silent' }),
    });
    const key = `snp_${randomBytes(10).toString('hex')}`;
    const staged = await store.stage(key);
    await mkdir(staged, { recursive: true });
    await writeFile(join(staged, 'pages.img'), bytes);
    up.ours.push(await time(() => store.commit(key, staged)));
    const rawKey = `${prefix}/raw-${i}`;
    up.raw.push(await time(() => new Upload({ client, params: { Bucket: bucket, Key: rawKey, Body: bytes } }).done()));
    await rm(join(workDir, `s3-cache-${i}`, key), { recursive: true, force: true });
    down.ours.push(await time(() => store.open(key)));
    down.raw.push(
      await time(async () => {
        const got = await client.send(new GetObjectCommand({ Bucket: bucket, Key: rawKey }));
        await writeFile(
          join(workDir, `raw-${i}`),
          await (got.Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray(),
        );
      }),
    );
    const back = await readFile(join(workDir, `s3-cache-${i}`, key, 'pages.img'));
    if (!back.equals(bytes)) throw new Error('the store returned other bytes than it was given');
    await rm(join(workDir, `s3-cache-${i}`), { recursive: true, force: true });
    await rm(join(workDir, `raw-${i}`), { force: true });
  }
  const row = (metric: string, s: { ours: number[]; raw: number[] }, target: string): S3Row => {
    const o = summarize(s.ours);
    const r = summarize(s.raw);
    return { metric, ours: o, raw: r, ratio: Math.round((o.p50 / r.p50) * 100) / 100, target };
  };
  return {
    upload: row('S3 snapshot upload 64 MiB (ms)', up, 'ratio ≤ 1.5 against one plain SDK upload'),
    download: row('S3 snapshot download 64 MiB, sha256 checked (ms)', down, 'ratio ≤ 1.5 against one plain GET'),
  };
}

/** Two memory snapshots of one sandbox through a server with its store in S3, then restores cold and cached. */
async function benchLineage(
  s3: { bucket: string; prefix: string; endpoint: string; region: string },
  client: S3Client,
  options: { workDir: string; templatesDir: string; log: (message: string) => void },
  n: number,
): Promise<{ restore: S3Row; firstBytes: number; secondBytes: number }> {
  const dataDir = await mkdtemp(join(options.workDir, 'data-s3-'));
  const config = loadConfig(process.env, {
    dataDir,
    templatesDir: options.templatesDir,
    port: 0,
    // Beside the bench's other servers: E2B listeners on ports of their own too.
    e2b: { apiPort: 0, envdPort: 0 },
    logLevel: 'warn',
    warmPool: [],
    snapshotStore: {
      location: { bucket: s3.bucket, prefix: s3.prefix },
      endpoint: s3.endpoint,
      region: s3.region,
      cacheMiB: 10_240,
      durable: true,
    },
  });
  const prepared = await setup(config, { onLog: () => undefined });
  const server = await startServer(config);
  const conn = { apiUrl: server.url, apiKey: (await readFile(prepared.adminKeyPath, 'utf8')).trim() };
  const chunkBytes = async () =>
    (await listAll(client, s3.bucket, `${s3.prefix}/chunks/`)).reduce((sum, o) => sum + o.size, 0);
  try {
    options.log('s3 lineage: two snapshots');
    const sandbox = await Sandbox.create({ ...conn, memoryMiB: 512, timeoutMs: 1_800_000 });
    const before = await chunkBytes();
    const first = await sandbox.snapshots.create({ name: 'bench-s3-1' });
    const afterFirst = await chunkBytes();
    await sandbox.commands.run(['sh', '-c', 'echo changed > /root/changed.txt'], { check: true });
    await sandbox.snapshots.create({ name: 'bench-s3-2' });
    const afterSecond = await chunkBytes();
    await sandbox.delete();
    const cold: number[] = [];
    const warm: number[] = [];
    for (let i = 0; i < n; i++) {
      options.log(`s3 restore ${i + 1}/${n}`);
      await rm(join(dataDir, 'snapshot-cache', first.id), { recursive: true, force: true });
      cold.push(await restoreOnce(conn, 'bench-s3-1'));
      warm.push(await restoreOnce(conn, 'bench-s3-1'));
    }
    const o = summarize(cold);
    const r = summarize(warm);
    return {
      restore: {
        metric: 'create from a memory snapshot, cache dropped: download from S3 (ms)',
        ours: o,
        raw: r,
        ratio: Math.round((o.p50 / r.p50) * 100) / 100,
        target: 'baseline: the same create with the snapshot in the local cache',
      },
      firstBytes: afterFirst - before,
      secondBytes: afterSecond - afterFirst,
    };
  } finally {
    await server.close();
    await rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
  }
}

async function restoreOnce(conn: { apiUrl: string; apiKey: string }, ref: string): Promise<number> {
  let sandbox: Sandbox | undefined;
  const ms = await time(async () => {
    sandbox = await Sandbox.create({ ...conn, fromSnapshot: ref, timeoutMs: 600_000 });
    await sandbox.commands.run(['true'], { check: true });
  });
  await sandbox?.delete();
  return ms;
}

async function listAll(client: S3Client, bucket: string, under: string): Promise<Array<{ key: string; size: number }>> {
  const out: Array<{ key: string; size: number }> = [];
  let token: string | undefined;
  do {
    const page = await client.send(
      new ListObjectsV2Command({
        Bucket: bucket,
        Prefix: under,
        ...(token === undefined ? {} : { ContinuationToken: token }),
      }),
    );
    for (const c of page.Contents ?? []) out.push({ key: c.Key as string, size: c.Size ?? 0 });
    token = page.IsTruncated === true ? page.NextContinuationToken : undefined;
  } while (token !== undefined);
  return out;
}

async function emptyPrefix(client: S3Client, bucket: string, prefix: string): Promise<void> {
  for (const o of await listAll(client, bucket, `${prefix}/`)) {
    await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: o.key }));
  }
}
