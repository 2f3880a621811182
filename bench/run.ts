/**
 * `npm run bench`: the numbers Burrow publishes, each next to the raw runtime measured in the same run.
 * Writes bench/results/<date>.json and regenerates docs/performance.md.
 *
 * Flags: `--quick` (few iterations: checks the harness runs, its numbers mean little), `--iterations N`.
 * Env: `BURROW_BENCH_TEMPLATES_DIR` (default /var/tmp/burrow-test-templates, shared with the tests).
 */
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { cpus, freemem, release, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildTemplate } from '@burrow/runtime-gvisor';
import { Sandbox } from '@burrow/sdk';
import { loadConfig, setup, startServer } from '@burrow/server';
import { benchExec } from './exec-bench.js';
import { benchFiles } from './files-bench.js';
import { benchPersistence } from './persistence-bench.js';
import { RawRunsc } from './raw-runsc.js';
import { type Summary, summarize, time } from './stats.js';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..');
const quick = process.argv.includes('--quick');
const itArg = process.argv.indexOf('--iterations');
const iterations = itArg > 0 ? Number(process.argv[itArg + 1]) : quick ? 3 : 30;
const templatesDir = process.env.BURROW_BENCH_TEMPLATES_DIR ?? '/var/tmp/burrow-test-templates';

interface Row {
  metric: string;
  ours: Summary;
  raw: Summary | null;
  /** ours.p50 / raw.p50 */
  ratio: number | null;
  target: string;
}

const log = (msg: string) => process.stderr.write(`bench: ${msg}\n`);

async function main(): Promise<void> {
  const work = await mkdtemp('/var/tmp/burrow-bench-');
  const dataDir = join(work, 'data');
  await mkdir(dataDir);
  const config = loadConfig(process.env, { dataDir, templatesDir, port: 0, logLevel: 'warn' });
  log(`setup (template cache ${templatesDir})`);
  const prepared = await setup(config, { onLog: () => undefined });
  const server = await startServer(config);
  const conn = { apiUrl: server.url, apiKey: (await readFile(prepared.adminKeyPath, 'utf8')).trim() };
  const base = await buildTemplate({ templatesDir, apt: [], run: [] });
  const raw = new RawRunsc(join(work, 'raw'), base.rootfsDir);
  const rows: Row[] = [];
  try {
    rows.push(...(await benchCore(conn, raw)));
    rows.push(...(await benchExec(conn, raw, { iterations, log })));
    rows.push(...(await benchFiles(conn, { quick, workDir: work, log })));
    const persistence = await benchPersistence(conn, raw, { iterations, workDir: join(work, 'images'), log });
    rows.push(...persistence.rows);
    log(`image sizes: idle ${persistence.imageBytes.idle} B, 512 MiB dirty ${persistence.imageBytes.dirty} B`);
  } finally {
    await server.close();
    await rm(work, { recursive: true, force: true }).catch(() => undefined);
  }
  const result = { date: new Date().toISOString(), quick, iterations, machine: machineInfo(), rows };
  const day = result.date.slice(0, 10);
  await writeFile(
    join(repo, 'bench', 'results', `${day}${quick ? '-quick' : ''}.json`),
    `${JSON.stringify(result, null, 2)}\n`,
  );
  if (!quick) await writeFile(join(repo, 'docs', 'performance.md'), renderMarkdown(result));
  for (const r of rows) {
    log(
      `${r.metric}: p50 ${r.ours.p50} ms, p95 ${r.ours.p95} ms, p99 ${r.ours.p99} ms` +
        (r.raw ? `; raw p50 ${r.raw.p50} ms, ratio ${r.ratio}` : ''),
    );
  }
}

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
    for (let j = 0; j < 5; j++) execRtt.push(await time(() => sb.commands.run(['true'], { check: true })));
    del.push(await time(() => sb.delete()));
    // Raw: the same runsc flags and overlay, no server.
    const id = `raw${String(i).padStart(4, '0')}`;
    rawCreateFirst.push(
      await time(async () => {
        await raw.create(id);
        await raw.exec(id, 'true');
      }),
    );
    for (let j = 0; j < 5; j++) rawExec.push(await time(() => raw.exec(id, 'true')));
    rawDel.push(await time(() => raw.delete(id)));
  }
  return [
    row('create → first exec', createFirst, rawCreateFirst, 'p50 ≤ 100 ms (issue 7)'),
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

function renderMarkdown(result: {
  date: string;
  iterations: number;
  machine: Record<string, string | number>;
  rows: Row[];
}): string {
  const m = result.machine;
  const lines = [
    '# Performance',
    '',
    'Generated by `npm run bench` (bench/run.ts); do not edit by hand. Raw = the same runsc flags and overlay disk',
    'driven directly with runsc commands, measured in the same run; ratio = ours p50 / raw p50.',
    '',
    `Run ${result.date}, ${result.iterations} iterations. Machine: ${m.cpu}, ${m.cores} cores, ${m.memoryGiB} GiB,`,
    `kernel ${m.kernel}, Node ${m.node}, ${m.runsc}.`,
    '',
    '| metric | p50 ms | p95 ms | p99 ms | raw p50 ms | raw p95 ms | ratio | target |',
    '|---|---|---|---|---|---|---|---|',
    ...result.rows.map(
      (r) =>
        `| ${r.metric} | ${r.ours.p50} | ${r.ours.p95} | ${r.ours.p99} | ${r.raw?.p50 ?? '—'} | ${r.raw?.p95 ?? '—'} | ${r.ratio ?? '—'} | ${r.target} |`,
    ),
    '',
  ];
  return lines.join('\n');
}

await main();
