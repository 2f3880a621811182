/**
 * bench/results/*.json → docs/performance.md: the newest full run (each row with its change against the previous
 * full run: the reproducibility check), and the newest density run.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { DensityResult } from './density-bench.js';
import type { HostConditions } from './host-conditions.js';
import type { Summary } from './stats.js';

/** One bench row. */
export interface Row {
  metric: string;
  ours: Summary;
  raw: Summary | null;
  /** ours.p50 / raw.p50 */
  ratio: number | null;
  target: string;
  /** Unit of the samples when they are not ms (a throughput row: `Mbit/s`, higher is better). @default 'ms' */
  unit?: string;
}

/** One run as written to bench/results. */
export interface RunResult {
  date: string;
  /** `full`: every section; `partial`: `--only`; `density`: `--density`. */
  kind: 'full' | 'partial' | 'density';
  quick: boolean;
  iterations: number;
  creates: number;
  poolSize: number;
  machine: Record<string, string | number>;
  /** What the host did during the run (null in older result files). */
  host: HostConditions | null;
  rows: Row[];
  notes: string[];
  density: DensityResult | null;
}

/** The runs docs/performance.md is made from (null where none is kept yet). */
export interface Runs {
  full: RunResult | null;
  previousFull: RunResult | null;
  density: RunResult | null;
}

/** Newest full run, the one before it, and the newest density run in `resultsDir` (quick runs are ignored). */
export async function loadRuns(resultsDir: string): Promise<Runs> {
  const runs: RunResult[] = [];
  for (const name of (await readdir(resultsDir)).sort()) {
    if (!name.endsWith('.json')) continue;
    const parsed = JSON.parse(await readFile(join(resultsDir, name), 'utf8')) as Partial<RunResult>;
    if (parsed.quick || parsed.date === undefined || parsed.rows === undefined) continue;
    runs.push({
      kind: 'full',
      iterations: 0,
      creates: 0,
      poolSize: 0,
      notes: [],
      density: null,
      host: null,
      machine: {},
      ...parsed,
    } as RunResult);
  }
  runs.sort((a, b) => a.date.localeCompare(b.date));
  const full = runs.filter((r) => r.kind === 'full');
  return {
    full: full.at(-1) ?? null,
    previousFull: full.at(-2) ?? null,
    density: runs.filter((r) => r.kind === 'density').at(-1) ?? null,
  };
}

/**
 * Change of `now` against `before` in whole percent, or null where it means nothing (no earlier value, an earlier
 * value of 0 or less, a value that is not a finite number). Rounded once, so the ±20 % check and the printed figure
 * agree (a +20.4 % change is +20 %, within).
 */
function changePct(now: number | null | undefined, before: number | null | undefined): number | null {
  if (typeof now !== 'number' || typeof before !== 'number' || !Number.isFinite(now) || !(before > 0)) return null;
  return Math.round(((now - before) / before) * 100);
}
const pct = (change: number) => `${change >= 0 ? '+' : ''}${change}%`;

/** A table cell's text: a `|` in it (the tree rows' "tar|tar") would end the cell. */
const cell = (text: string) => text.replaceAll('|', '\\|');

const prefix = (r: Row) => r.metric.split(' (')[0] as string;

/**
 * The row of `rows` that is `r` in another run: the same metric, or else the only one with the same name up to the
 * first " (" (the files and stdout rows carry their run's figures in parentheses). Three exec rows share the prefix
 * "exec round trip" and are told apart by the whole name; a prefix-only match would compare all three with the
 * first one.
 */
function sameRow(rows: readonly Row[], r: Row, current: readonly Row[]): Row | undefined {
  const exact = rows.find((p) => p.metric === r.metric);
  if (exact) return exact;
  // The prefix must name one row in both runs: else an old run's single "exec round trip" row would stand in for
  // each of the three of a newer run.
  if (current.filter((p) => prefix(p) === prefix(r)).length !== 1) return undefined;
  const candidates = rows.filter((p) => prefix(p) === prefix(r));
  return candidates.length === 1 ? candidates[0] : undefined;
}

/** A row's short name in the reproducibility line: its prefix, or its whole name where the prefix is shared. */
const shortName = (rows: readonly Row[], r: Row) =>
  rows.filter((p) => prefix(p) === prefix(r)).length === 1 ? prefix(r) : r.metric;

/** A run's host line: its own process start at both ends of the run, load, steal and busy CPU. */
function hostLine(run: RunResult, previous: RunResult | null): string {
  const h = run.host;
  if (!h) return 'Host conditions were not recorded in this run.';
  const p = previous?.host;
  return (
    `Host during the run: \`/bin/true\` started from Node in ${h.start.spawnP50Ms} ms (p50) at the start and ` +
    `${h.end.spawnP50Ms} ms at the end${p ? ` (previous run: ${p.start.spawnP50Ms} and ${p.end.spawnP50Ms} ms)` : ''}; ` +
    `load average ${h.start.loadAverage1m} → ${h.end.loadAverage1m}; CPU busy ${h.busyPct} % of all cores, ` +
    `steal ${h.stealPct} %.`
  );
}

/**
 * The reproducibility check against the previous full run: how many rows' p50 (and, where the row has a raw
 * baseline, ratio) stayed within ±20 %, and which did not.
 */
function reproducibility(run: RunResult, previous: RunResult): string[] {
  const pairs = run.rows.flatMap((r) => {
    const before = sameRow(previous.rows, r, run.rows);
    return before ? [{ now: r, before }] : [];
  });
  /** Rows whose `of` can be compared, and those of them outside ±20 %, each with its change. */
  const check = (of: (r: Row) => number | null | undefined) => {
    const compared = pairs.flatMap(({ now, before }) => {
      const change = changePct(of(now), of(before));
      return change === null ? [] : [{ now, change }];
    });
    const outside = compared.filter(({ change }) => Math.abs(change) > 20);
    const list = outside.map(({ now, change }) => `${shortName(run.rows, now)} ${pct(change)}`).join('; ');
    return `${compared.length - outside.length} of ${compared.length} rows within${list ? `; outside: ${list}` : ''}`;
  };
  return [
    `Reproducibility against ${previous.date} (target ±20 %): p50 of ${check((r) => r.ours.p50)}. ` +
      `Ratio to raw of ${check((r) => r.ratio)}.`,
  ];
}

function machineLine(m: Record<string, string | number>): string {
  return `${m.cpu}, ${m.cores} cores, ${m.memoryGiB} GiB, kernel ${m.kernel}, Node ${m.node}, ${m.runsc}`;
}

/** The whole of docs/performance.md. */
export function renderMarkdown(runs: Runs): string {
  const lines = [
    '# Performance',
    '',
    'Generated by `npm run bench` (bench/run.ts, bench/report.ts) from bench/results; do not edit by hand. Raw = the',
    'same runsc flags and overlay disk driven directly with runsc commands, measured in the same run; ratio = ours',
    'p50 / raw p50. "vs previous" = this p50 against the previous full run (reproducibility; target ±20%).',
    '',
  ];
  const { full, previousFull, density } = runs;
  if (full) {
    lines.push(
      `Run ${full.date}: ${full.iterations} iterations, ${full.creates} creates per time-to-first-command variant, warm`,
      `pool of ${full.poolSize}. Machine: ${machineLine(full.machine)}.`,
      previousFull ? `Previous full run: ${previousFull.date}.` : 'No previous full run to compare with.',
      hostLine(full, previousFull),
      '',
      '| metric | p50 ms | p95 ms | p99 ms | raw p50 ms | raw p95 ms | ratio | vs previous | target |',
      '|---|---|---|---|---|---|---|---|---|',
    );
    for (const r of full.rows) {
      const before = previousFull ? sameRow(previousFull.rows, r, full.rows) : undefined;
      const change = changePct(r.ours.p50, before?.ours.p50);
      const vsPrevious = change === null ? '—' : pct(change);
      const u = r.unit === undefined || r.unit === 'ms' ? '' : ` ${r.unit}`;
      lines.push(
        `| ${cell(r.metric)} | ${r.ours.p50}${u} | ${r.ours.p95}${u} | ${r.ours.p99}${u} | ${r.raw ? `${r.raw.p50}${u}` : '—'} | ${r.raw ? `${r.raw.p95}${u}` : '—'} | ${r.ratio ?? '—'} | ${vsPrevious} | ${cell(r.target)} |`,
      );
    }
    if (previousFull) lines.push('', ...reproducibility(full, previousFull));
    for (const note of full.notes) lines.push('', note);
    lines.push('');
  }
  const d = density?.density;
  if (density && d) {
    lines.push(
      '## Density',
      '',
      `Run ${density.date} (\`npm run bench -- --density\`). Machine: ${machineLine(density.machine)}.`,
      'Idle running: PSS of the sandbox host processes (sentry, gofer, stubs) and its memory cgroup usage. Paused: no',
      'process is left; cost = server RSS growth + kernel memory (Slab, PageTables, KernelStack) per paused sandbox.',
      '',
      '| what | target | reached | per sandbox |',
      '|---|---|---|---|',
      `| idle running sandboxes | ${d.running.target} | ${d.running.reached} | PSS p50 ${d.running.pssMiBp50} MiB (max ${d.running.pssMiBmax}), cgroup ${d.running.cgroupMiBp50} MiB, MemAvailable −${d.running.memAvailableDropMiBPer} MiB |`,
      `| paused sandboxes | ${d.paused.target} | ${d.paused.reached} | server RSS ${d.paused.serverRssKiBPer} KiB${d.paused.serverHeapKiBPer === undefined ? '' : ` (JS heap ${d.paused.serverHeapKiBPer} KiB, with the bench's own SDK handles)`} + kernel ${d.paused.kernelKiBPer} KiB (target ≤ 1 MiB); disk ${d.paused.diskMiBPer} MiB |`,
      '',
    );
    const both = d.simultaneous;
    lines.push(
      both
        ? `Both held at once (paused ones made first, then the running ones next to them): the API listed ${both.listedPaused} paused and ${both.listedRunning} running sandboxes of the run at the same moment; load average ${both.loadAverage1m} on 2 cores; exec round trip of \`true\` on a running one p50 ${both.execP50Ms} ms; ${both.resumedOk}/${both.resumedTried} paused ones resumed, ran a command and paused again under that load.`
        : 'This run paused the running sandboxes to make up the paused count: both loads were not held at once.',
      '',
    );
    if (d.failures.length > 0) lines.push('Failures:', '', ...d.failures.map((f) => `- ${f}`), '');
  } else {
    lines.push(
      '## Density',
      '',
      'No complete density run yet (`npm run bench -- --density`); the figures of the partial run are in',
      '[ADR 0004](adr/0004-warm-pool.md).',
      '',
    );
  }
  return lines.join('\n');
}
