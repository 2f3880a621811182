/**
 * Issue 7's numbers: time to first command (create → first `true` exec finished) with the warm pool and cold, over
 * `creates` sandboxes each, against raw `runsc create` + `start` + `exec true` of the same rootfs in the same run; and
 * where a cold create's time goes (disk image, loop mount, overlay, runsc create, runsc start, first exec), measured
 * step by step on the raw path.
 */
import { execFile } from 'node:child_process';
import { mkdir, rm, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { DEFAULT_RESOURCES } from '@burrow/contract';
import { Sandbox } from '@burrow/sdk';
import type { WarmPool } from '@burrow/server';
import type { RawRunsc } from './raw-runsc.js';
import { type Summary, summarize, time } from './stats.js';

const run = promisify(execFile);

/** One bench row (same shape as run.ts's). */
export interface StartRow {
  metric: string;
  ours: Summary;
  raw: Summary | null;
  ratio: number | null;
  target: string;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Samples of the cold create breakdown (each about 0.5 s). 10 samples leave the first `runsc exec` step up to 20 % apart
 * between two quiet full runs; 20 halve the variance of each p50.
 */
const COLD_STEP_SAMPLES = 20;

/** Delete in the background, a few at a time, outside every timed part. */
async function deleteAll(items: Array<() => Promise<unknown>>, concurrency = 4): Promise<void> {
  const queue = [...items];
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let next = queue.shift(); next !== undefined; next = queue.shift()) await next().catch(() => undefined);
    }),
  );
}

/** Wait until the pool holds `want` ready sandboxes and no refill is running. */
async function waitReady(pool: WarmPool, want: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (((await pool.readyCounts())[0] ?? 0) >= want && pool.isIdle()) return true;
    await sleep(50);
  }
  return false;
}

function row(metric: string, ours: number[], raw: number[] | null, target: string): StartRow {
  const o = summarize(ours);
  const r = raw ? summarize(raw) : null;
  return { metric, ours: o, raw: r, ratio: r ? Math.round((o.p50 / r.p50) * 100) / 100 : null, target };
}

/** Runs the time-to-first-command rows. `pool` is the server's warm pool (the bench runs the server in-process). */
export async function benchStart(
  conn: { apiUrl: string; apiKey: string },
  raw: RawRunsc,
  pool: WarmPool,
  options: { creates: number; poolSize: number; workDir: string; log: (message: string) => void },
): Promise<{ rows: StartRow[]; poolHits: number }> {
  const { creates, log } = options;
  const rows: StartRow[] = [];
  /** Create, then the first command; the two parts are kept per sample (`split`). */
  const firstCommand = async (split?: { create: number[]; exec: number[] }): Promise<Sandbox> => {
    const t0 = performance.now();
    const sandbox = await Sandbox.create({ ...conn, template: 'base', timeoutMs: 600_000 });
    const t1 = performance.now();
    await sandbox.commands.run(['true'], { check: true });
    split?.create.push(t1 - t0);
    split?.exec.push(performance.now() - t1);
    return sandbox;
  };
  const warmSplit = { create: [] as number[], exec: [] as number[] };

  // Warm: before each create the pool is full and no refill runs (the wait is outside the timing): the steady state
  // of a server whose create rate is below its refill rate. Deletes run in batches between samples.
  pool.setTargets([{ template: 'base', count: options.poolSize, resources: { ...DEFAULT_RESOURCES } }]);
  if (!(await waitReady(pool, options.poolSize, 120_000))) throw new Error('the warm pool did not fill in 120 s');
  const warm: number[] = [];
  let poolHits = 0;
  let pending: Array<() => Promise<unknown>> = [];
  for (let i = 0; i < creates; i++) {
    if (i % 10 === 0) log(`time to first command, warm pool ${i + 1}/${creates}`);
    if (pending.length >= 10) {
      await deleteAll(pending);
      pending = [];
    }
    await waitReady(pool, options.poolSize, 60_000);
    const ready = new Set(await pool.memberIds());
    let sandbox: Sandbox | undefined;
    warm.push(
      await time(async () => {
        sandbox = await firstCommand(warmSplit);
      }),
    );
    const sb = sandbox as Sandbox;
    if (ready.has(sb.id)) poolHits++;
    pending.push(() => sb.delete());
  }
  await deleteAll(pending);
  // Cold: no pool.
  await pool.drain();
  const cold: number[] = [];
  pending = [];
  for (let i = 0; i < creates; i++) {
    if (i % 10 === 0) log(`time to first command, cold ${i + 1}/${creates}`);
    if (pending.length >= 10) {
      await deleteAll(pending);
      pending = [];
    }
    let sandbox: Sandbox | undefined;
    cold.push(
      await time(async () => {
        sandbox = await firstCommand();
      }),
    );
    const sb = sandbox as Sandbox;
    pending.push(() => sb.delete());
  }
  await deleteAll(pending);
  // Raw: runsc create + start + exec true on an overlay of the same rootfs.
  const rawFirst: number[] = [];
  pending = [];
  for (let i = 0; i < creates; i++) {
    if (i % 10 === 0) log(`time to first command, raw runsc ${i + 1}/${creates}`);
    if (pending.length >= 10) {
      await deleteAll(pending);
      pending = [];
    }
    const id = `rawstart${String(i).padStart(4, '0')}`;
    rawFirst.push(
      await time(async () => {
        await raw.create(id);
        await raw.exec(id, 'true');
      }),
    );
    pending.push(() => raw.delete(id));
  }
  await deleteAll(pending);
  rows.push(
    row(
      `time to first command, warm pool (${poolHits}/${creates} from the pool)`,
      warm,
      rawFirst,
      'p50 ≤ 100 ms, p99 ≤ 500 ms (issue 7)',
    ),
  );
  rows.push(row('warm pool: create (claim) alone', warmSplit.create, null, '—'));
  rows.push(row('warm pool: first exec `true` alone', warmSplit.exec, null, '—'));
  rows.push(row('time to first command, cold (no pool)', cold, rawFirst, '—'));
  rows.push(...(await coldBreakdown(raw, options.workDir, Math.min(creates, COLD_STEP_SAMPLES), log)));
  return { rows, poolHits };
}

/**
 * Where a cold create's time goes, on the raw path with the driver's own host steps: sparse image + mkfs.ext4,
 * loop mount, overlay mount, runsc create, runsc start, first `runsc exec true`.
 */
async function coldBreakdown(
  raw: RawRunsc,
  workDir: string,
  samples: number,
  log: (message: string) => void,
): Promise<StartRow[]> {
  log(`cold create breakdown x${samples}`);
  const steps: Record<string, number[]> = { mkfs: [], loop: [], overlay: [], create: [], start: [], exec: [] };
  for (let i = 0; i < samples; i++) {
    const dir = join(workDir, `breakdown-${i}`);
    const id = `rawstep${String(i).padStart(4, '0')}`;
    await mkdir(join(dir, 'disk'), { recursive: true });
    const image = join(dir, 'disk.img');
    try {
      steps.mkfs?.push(
        await time(async () => {
          await writeFile(image, '');
          await truncate(image, DEFAULT_RESOURCES.diskMiB * 1024 * 1024);
          await run('mkfs.ext4', [
            '-q',
            '-F',
            '-m',
            '0',
            '-E',
            'lazy_itable_init=1,lazy_journal_init=1,nodiscard',
            image,
          ]);
        }),
      );
      steps.loop?.push(
        await time(() => run('mount', ['-t', 'ext4', '-o', 'loop,nodev,nosuid', image, join(dir, 'disk')])),
      );
      const timings = await raw.createSteps(id);
      steps.overlay?.push(timings.overlayMs);
      steps.create?.push(timings.createMs);
      steps.start?.push(timings.startMs);
      steps.exec?.push(await time(() => raw.exec(id, 'true')));
    } finally {
      await raw.delete(id);
      await run('umount', [join(dir, 'disk')]).catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    }
  }
  const names: Record<string, string> = {
    mkfs: 'cold create step: sparse 2 GiB image + mkfs.ext4',
    loop: 'cold create step: loop mount of the image',
    overlay: 'cold create step: overlay mount over the template',
    create: 'cold create step: `runsc create`',
    start: 'cold create step: `runsc start`',
    exec: 'cold create step: first `runsc exec true`',
  };
  return Object.entries(steps).map(([key, values]) => row(names[key] ?? key, values, null, '—'));
}
