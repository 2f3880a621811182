/**
 * CI smoke test of `npm run bench` (issue 7): the harness still runs end to end with `--quick` (few iterations, a
 * 256 MiB file instead of 2 GiB, 3 running + 5 paused sandboxes for density) and still produces every figure the
 * issues ask for, each with its raw-runtime baseline where it has one. Its numbers are not checked: this machine is
 * shared and the quick run is too short to mean anything (the published figures come from full runs on a quiet
 * machine, docs/performance.md).
 *
 * Results go to a temporary dir (`--results-dir`), so bench/results and docs/performance.md are left alone, and the
 * bench's own work dir (data dir, sandboxes, images) must be gone afterwards.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const repo = join(import.meta.dirname, '..', '..');

interface Stat {
  p50: number;
  p95: number;
  p99: number;
}
interface BenchRow {
  metric: string;
  ours: Stat;
  raw: Stat | null;
  ratio: number | null;
}

/** Runs `tsx bench/run.ts ...args --results-dir DIR`; returns the result JSON and the bench's work dir. */
async function runBench(
  args: string[],
  resultsDir: string,
): Promise<{ result: Record<string, unknown>; workDir: string }> {
  const { output } = await new Promise<{ output: string }>((resolve, reject) => {
    execFile(
      join(repo, 'node_modules', '.bin', 'tsx'),
      ['bench/run.ts', ...args, '--results-dir', resultsDir],
      { cwd: repo, maxBuffer: 64 * 1024 * 1024, timeout: 18 * 60_000 },
      (error, stdout, stderr) =>
        error
          ? reject(new Error(`bench ${args.join(' ')} failed: ${error.message}\n${stderr.slice(-4000)}`))
          : resolve({ output: `${stdout}\n${stderr}` }),
    );
  });
  const files = (await readdir(resultsDir)).filter((f) => f.endsWith('.json'));
  expect(files).toHaveLength(1);
  const result = JSON.parse(await readFile(join(resultsDir, files[0] as string), 'utf8')) as Record<string, unknown>;
  const workDir = /saved to (\/var\/tmp\/burrow-bench-[^/]+)\//.exec(output)?.[1] ?? '';
  return { result, workDir };
}

const gone = (path: string) =>
  stat(path).then(
    () => false,
    () => true,
  );

describe('npm run bench -- --quick', () => {
  let dir = '';
  beforeAll(async () => {
    dir = await mkdtemp('/tmp/burrow-bench-quick-');
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('produces every issue figure with its raw baseline and leaves nothing behind', {
    timeout: 24 * 60_000,
  }, async () => {
    const resultsDir = join(dir, 'full');
    await mkdir(resultsDir);
    const { result, workDir } = await runBench(['--quick'], resultsDir);
    expect(result.kind).toBe('full');
    expect(result.quick).toBe(true);
    const rows = result.rows as BenchRow[];
    const find = (prefix: string) => {
      const row = rows.find((r) => r.metric.startsWith(prefix));
      if (row === undefined) throw new Error(`no bench row "${prefix}…" in ${rows.map((r) => r.metric).join(' | ')}`);
      return row;
    };
    for (const row of rows) {
      for (const value of [row.ours.p50, row.ours.p95, row.ours.p99]) expect(value, row.metric).toBeGreaterThan(0);
      expect(row.ours.p50, row.metric).toBeLessThanOrEqual(row.ours.p99);
    }
    // Each figure an issue names, with the raw runtime measured in the same run where the issue asks for it.
    const withRaw = [
      'time to first command, warm pool',
      'time to first command, cold',
      'create → first exec',
      'exec round trip (`true`)',
      'CLI CPU, `burrow --version`',
      'CLI CPU, `burrow exec ID -- true`',
      "SDK import CPU, `import('@burrow/sdk')`",
      'stdout 200 MiB streamed, `dd bs=1M`',
      'upload one',
      'download one',
      'upload a tree of 10000',
      'download a tree of 10000',
      'pause, idle',
      'resume, idle',
      'fork x1, idle',
      'fork x10, idle',
      'pause, 512 MiB dirty',
      'resume, 512 MiB dirty',
      // Baseline: the same step on an unencrypted server in the same run.
      'encrypted images: pause, idle',
      'encrypted images: resume, idle',
      'encrypted images: pause, 512 MiB dirty',
      'encrypted images: resume, 512 MiB dirty',
      // Baseline: the same request straight to the sandbox's address; a plain resume.
      'preview: one request through the proxy',
      'preview: request that wakes a paused sandbox',
    ];
    // With an S3 server configured (CI starts one): the S3 store's rows, each against its plain-SDK or cached baseline.
    if (process.env.BURROW_TEST_S3_STORE !== undefined) {
      withRaw.push('S3 snapshot upload', 'S3 snapshot download', 'create from a memory snapshot, cache dropped');
    }
    for (const prefix of withRaw) {
      const row = find(prefix);
      expect(row.raw?.p50, prefix).toBeGreaterThan(0);
      expect(row.ratio, prefix).toBeCloseTo((row.ours.p50 / (row.raw?.p50 ?? 1)) as number, 1);
    }
    expect(workDir).not.toBe('');
    expect(await gone(workDir)).toBe(true);
  });

  it('holds paused and idle running sandboxes at once in the density run', { timeout: 6 * 60_000 }, async () => {
    const resultsDir = join(dir, 'density');
    await mkdir(resultsDir);
    const { result, workDir } = await runBench(['--density', '--quick'], resultsDir);
    const density = result.density as {
      running: { reached: number; pssMiBp50: number };
      paused: { reached: number; diskMiBPer: number };
      simultaneous: { listedRunning: number; listedPaused: number; resumedOk: number; resumedTried: number };
      failures: string[];
    };
    expect(density.failures).toEqual([]);
    expect(density.paused.reached).toBe(5);
    expect(density.running.reached).toBe(3);
    expect(density.simultaneous.listedPaused).toBe(5);
    expect(density.simultaneous.listedRunning).toBe(3);
    expect(density.simultaneous.resumedOk).toBe(density.simultaneous.resumedTried);
    expect(density.running.pssMiBp50).toBeGreaterThan(0);
    expect(workDir).not.toBe('');
    expect(await gone(workDir)).toBe(true);
  });
});
