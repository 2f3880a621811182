/**
 * `npm run bench`: the numbers Burrow publishes, each next to the raw runtime measured in the same run.
 * Writes bench/results/<date>.json and regenerates docs/performance.md.
 *
 * Flags: `--quick` (few iterations: checks the harness runs, its numbers mean little), `--iterations N`,
 * `--creates N` (time-to-first-command samples per variant; default 100, 5 with --quick), `--pool N` (warm pool size
 * during the warm samples; default 4), `--only start,core,cli,exec,files,dns,persistence,s3,network,preview,volumes` (a subset; not written to
 * docs/performance.md), `--density` (only the density run: `--running N` default 50, `--paused N` default 200),
 * `--results-dir DIR` (write the result JSON there instead of bench/results, and leave docs/performance.md alone:
 * the CI smoke test `tests/e2e/bench-quick.test.ts` uses it).
 * Env: `BURROW_BENCH_TEMPLATES_DIR` (default /var/tmp/burrow-test-templates, shared with the tests);
 * `BURROW_BENCH_S3_STORE=s3://bucket/prefix` with AWS_* for the S3 rows (skipped with a note without it).
 *
 * docs/performance.md is regenerated from the newest full run and the newest density run in bench/results, with
 * each row's change against the previous full run (reproducibility).
 */
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { cpus, freemem, release, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildTemplate } from '@burrow/runtime-gvisor';
import { Sandbox } from '@burrow/sdk';
import { loadConfig, setup, startServer } from '@burrow/server';
import { benchCli } from './cli-bench.js';
import { benchDensity, type DensityResult } from './density-bench.js';
import { benchDns } from './dns-bench.js';
import { benchImageEncryption } from './encryption-bench.js';
import { benchExec } from './exec-bench.js';
import { benchFiles } from './files-bench.js';
import { type HostConditions, startHostConditions } from './host-conditions.js';
import { benchNetwork } from './network-bench.js';
import { benchPersistence } from './persistence-bench.js';
import { benchPreview } from './preview-bench.js';
import { RawRunsc } from './raw-runsc.js';
import { loadRuns, type Row, type RunResult, renderMarkdown } from './report.js';
import { benchS3 } from './s3-bench.js';
import { benchStart } from './start-bench.js';
import { summarize, time } from './stats.js';
import { benchVolumes } from './volume-bench.js';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..');
const quick = process.argv.includes('--quick');
const itArg = process.argv.indexOf('--iterations');
const iterations = itArg > 0 ? Number(process.argv[itArg + 1]) : quick ? 3 : 30;
const templatesDir = process.env.BURROW_BENCH_TEMPLATES_DIR ?? '/var/tmp/burrow-test-templates';
const numArg = (name: string, fallback: number): number => {
  const at = process.argv.indexOf(name);
  return at > 0 ? Number(process.argv[at + 1]) : fallback;
};
const creates = numArg('--creates', quick ? 5 : 100);
const poolSize = numArg('--pool', 4);
const density = process.argv.includes('--density');
const onlyArg = process.argv.indexOf('--only');
const only = onlyArg > 0 ? new Set((process.argv[onlyArg + 1] ?? '').split(',')) : null;
const wants = (section: string) => only === null || only.has(section);
const resultsArg = process.argv.indexOf('--results-dir');
const publishes = resultsArg < 0;
const resultsDir = resultsArg > 0 ? (process.argv[resultsArg + 1] as string) : join(repo, 'bench', 'results');

const log = (msg: string) => process.stderr.write(`bench: ${msg}\n`);

async function main(): Promise<void> {
  const work = await mkdtemp('/var/tmp/burrow-bench-');
  const dataDir = join(work, 'data');
  await mkdir(dataDir);
  // The warm pool starts empty: the start bench sizes it, and drains it before the other rows.
  const config = loadConfig(process.env, {
    dataDir,
    templatesDir,
    port: 0,
    e2b: { apiPort: 0, envdPort: 0 },
    logLevel: 'warn',
    warmPool: [],
  });
  log(`setup (template cache ${templatesDir})`);
  const prepared = await setup(config, { onLog: () => undefined });
  const server = await startServer(config);
  const conn = { apiUrl: server.url, apiKey: (await readFile(prepared.adminKeyPath, 'utf8')).trim() };
  const base = await buildTemplate({ templatesDir, apt: [], run: [] });
  const raw = new RawRunsc(join(work, 'raw'), base.rootfsDir);
  const rows: Row[] = [];
  let densityResult: DensityResult | null = null;
  let host: HostConditions | null = null;
  const notes: string[] = [];
  const conditions = await startHostConditions();
  try {
    if (density) {
      densityResult = await benchDensity(conn, {
        running: numArg('--running', quick ? 3 : 50),
        paused: numArg('--paused', quick ? 5 : 200),
        dataDir,
        serverPid: process.pid,
        log,
      });
    } else {
      if (wants('start')) {
        const start = await benchStart(conn, raw, server.burrow.pool, {
          creates,
          poolSize,
          workDir: join(work, 'start'),
          log,
        });
        rows.push(...start.rows);
      }
      if (wants('core')) rows.push(...(await benchCore(conn, raw)));
      if (wants('cli')) rows.push(...(await benchCli(conn, { iterations, repo, log })));
      if (wants('exec')) rows.push(...(await benchExec(conn, raw, { iterations, log, driver: server.burrow.driver })));
      if (wants('files'))
        rows.push(
          ...(await benchFiles(conn, {
            quick,
            workDir: work,
            log,
            rootDirOf: (id) => server.burrow.driver.rootDir(id),
          })),
        );
      if (wants('dns')) rows.push(...(await benchDns({ lookups: quick ? 20 : 500, log })));
      if (wants('persistence')) {
        const persistence = await benchPersistence(conn, raw, { iterations, workDir: join(work, 'images'), log });
        rows.push(...persistence.rows);
        notes.push(
          `Pause image sizes: idle ${(persistence.imageBytes.idle / 1e6).toFixed(1)} MB, 512 MiB dirty ${(persistence.imageBytes.dirty / 1e6).toFixed(1)} MB.`,
        );
        const encryption = await benchImageEncryption(conn, await encryptedServer(work), { iterations, log });
        rows.push(...encryption.rows);
        notes.push(
          'Encrypted images: each encrypted pause and resume holds the plaintext image on a tmpfs for the step ' +
            `(memory cost at its peak: idle ${(encryption.imageBytes.idle / 1e6).toFixed(1)} MB, 512 MiB dirty ` +
            `${(encryption.imageBytes.dirty / 1e6).toFixed(1)} MB).`,
        );
      }
      if (wants('network')) {
        // --quick: one cycle (the smoke test checks that the rows come out, not their spread).
        const networkIterations = quick ? 1 : iterations;
        rows.push(...(await benchNetwork(conn, await unnetworkedServer(work), { iterations: networkIterations, log })));
      }
      if (wants('preview')) {
        const driver = server.burrow.driver;
        const ingress = (id: string) => driver.ingressAddress?.(id) ?? Promise.resolve(null);
        rows.push(...(await benchPreview(conn, ingress, { iterations: quick ? 1 : iterations, quick, log })));
      }
      if (wants('volumes')) rows.push(...(await benchVolumes(conn, { iterations: quick ? 1 : 3, quick, log })));
      if (wants('s3')) {
        const s3 = await benchS3({ iterations, quick, workDir: work, templatesDir, log });
        rows.push(...s3.rows);
        notes.push(...s3.notes);
      }
    }
    host = await conditions.finish();
  } finally {
    await server.burrow.pool.drain().catch(() => undefined);
    await server.close();
    await closeEncryptedServer?.();
    await closeUnnetworkedServer?.();
    await rm(work, { recursive: true, force: true }).catch(() => undefined);
  }
  const date = new Date().toISOString();
  const kind = density ? 'density' : only !== null ? 'partial' : 'full';
  const result: RunResult = {
    date,
    kind,
    quick,
    iterations,
    creates,
    poolSize,
    machine: machineInfo(),
    host,
    rows,
    notes,
    density: densityResult,
  };
  const suffix = `${quick ? '-quick' : ''}${kind === 'full' ? '' : `-${kind}`}`;
  await mkdir(resultsDir, { recursive: true });
  await writeFile(
    join(resultsDir, `${date.replace(/[:.]/g, '-')}${suffix}.json`),
    `${JSON.stringify(result, null, 2)}\n`,
  );
  if (publishes && !quick && kind !== 'partial') {
    await writeFile(join(repo, 'docs', 'performance.md'), renderMarkdown(await loadRuns(resultsDir)));
  }
  if (densityResult) log(`density: ${JSON.stringify(densityResult)}`);
  if (host) log(`host: ${JSON.stringify(host)}`);
  for (const r of rows) {
    const unit = r.unit ?? 'ms';
    log(
      `${r.metric}: p50 ${r.ours.p50} ${unit}, p95 ${r.ours.p95} ${unit}, p99 ${r.ours.p99} ${unit}` +
        (r.raw ? `; raw p50 ${r.raw.p50} ${unit}, ratio ${r.ratio}` : ''),
    );
  }
}

let closeEncryptedServer: (() => Promise<void>) | undefined;
let closeUnnetworkedServer: (() => Promise<void>) | undefined;

/** A second server, on its own data dir under `work`, with networking off (the network rows' baseline). */
async function unnetworkedServer(work: string): Promise<{ apiUrl: string; apiKey: string }> {
  const dataDir = join(work, 'data-no-network');
  await mkdir(dataDir);
  const config = loadConfig(
    { ...process.env, BURROW_NETWORK: 'off' },
    { dataDir, templatesDir, port: 0, e2b: { apiPort: 0, envdPort: 0 }, logLevel: 'warn', warmPool: [] },
  );
  const prepared = await setup(config, { onLog: () => undefined });
  const server = await startServer(config);
  closeUnnetworkedServer = () => server.close();
  return { apiUrl: server.url, apiKey: (await readFile(prepared.adminKeyPath, 'utf8')).trim() };
}

/** A second server, on its own data dir under `work`, with image encryption on (key made in its data dir). */
async function encryptedServer(work: string): Promise<{ apiUrl: string; apiKey: string }> {
  const dataDir = join(work, 'data-encrypted');
  await mkdir(dataDir);
  const config = loadConfig(
    { ...process.env, BURROW_IMAGE_ENCRYPTION: '1' },
    { dataDir, templatesDir, port: 0, e2b: { apiPort: 0, envdPort: 0 }, logLevel: 'warn', warmPool: [] },
  );
  const prepared = await setup(config, { onLog: () => undefined });
  const server = await startServer(config);
  closeEncryptedServer = () => server.close();
  return { apiUrl: server.url, apiKey: (await readFile(prepared.adminKeyPath, 'utf8')).trim() };
}

/**
 * Exec round trips per create in the core loop (ours and raw alike): 10 per iteration, 100 samples at the default 10
 * iterations. With 5 (50 samples) two quiet full runs of the same code differ by up to 21 % at p50 on this row.
 */
const CORE_EXECS = 10;

/** Issue 2's numbers: create→first exec, exec round trip, delete; against raw runsc create/exec/delete. */
async function benchCore(conn: { apiUrl: string; apiKey: string }, raw: RawRunsc): Promise<Row[]> {
  const createFirst: number[] = [];
  const execRtt: number[] = [];
  const del: number[] = [];
  const rawCreateFirst: number[] = [];
  const rawExec: number[] = [];
  const rawDel: number[] = [];
  for (let i = 0; i < iterations; i++) {
    log(`core ${i + 1}/${iterations}`);
    // Ours: through the SDK, HTTP, the server, the store and the gVisor driver.
    let sandbox: Sandbox | undefined;
    createFirst.push(
      await time(async () => {
        sandbox = await Sandbox.create({ ...conn, template: 'base', timeoutMs: 600_000 });
        await sandbox.commands.run(['true'], { check: true });
      }),
    );
    const sb = sandbox as Sandbox;
    for (let j = 0; j < CORE_EXECS; j++) execRtt.push(await time(() => sb.commands.run(['true'], { check: true })));
    del.push(await time(() => sb.delete()));
    // Raw: the same runsc flags and overlay, no server.
    const id = `raw${String(i).padStart(4, '0')}`;
    rawCreateFirst.push(
      await time(async () => {
        await raw.create(id);
        await raw.exec(id, 'true');
      }),
    );
    for (let j = 0; j < CORE_EXECS; j++) rawExec.push(await time(() => raw.exec(id, 'true')));
    rawDel.push(await time(() => raw.delete(id)));
  }
  return [
    row('create → first exec (issue 2 loop: a delete between creates, no pool)', createFirst, rawCreateFirst, '—'),
    row('exec round trip (`true`)', execRtt, rawExec, 'p50 ≤ 15 ms (issue 4)'),
    row('delete (verified)', del, rawDel, '—'),
  ];
}

function row(metric: string, ours: number[], raw: number[] | null, target: string): Row {
  const o = summarize(ours);
  const r = raw ? summarize(raw) : null;
  return { metric, ours: o, raw: r, ratio: r ? Math.round((o.p50 / r.p50) * 100) / 100 : null, target };
}

function machineInfo(): Record<string, string | number> {
  const runsc = (() => {
    try {
      return execFileSync('runsc', ['--version'], { encoding: 'utf8' }).split('\n')[0] ?? '';
    } catch {
      return 'unknown';
    }
  })();
  return {
    cpu: cpus()[0]?.model ?? 'unknown',
    cores: cpus().length,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    freeMemoryGiB: Math.round(freemem() / 2 ** 30),
    kernel: release(),
    node: process.version,
    runsc,
  };
}

await main();
