/**
 * What the host itself does during a bench run, so that a row that moved between two runs can be told apart
 * from a host that moved: the host's own process start (`/bin/true` through Node's `execFile`, as the bench starts
 * mkfs, mount and runsc) at the start and at the end of the run, the load average, and the CPU time the hypervisor
 * took away (steal, from the `cpu` line of /proc/stat) over the whole run.
 *
 * On a shared 2-core VM the in-sandbox exec floor, which runs no Burrow code, moves up to 30 % between two runs
 * 20 minutes apart; without a host reference the report cannot show why.
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import { percentile } from './stats.js';

const run = promisify(execFile);

/** Starts of `/bin/true` per probe; about 0.3-0.5 s on a 2-core machine. */
const SPAWN_SAMPLES = 50;

/** One probe of the host (at the start or at the end of a run). */
export interface HostProbe {
  /** ISO time of the probe. */
  at: string;
  /** 1-minute load average from /proc/loadavg. */
  loadAverage1m: number;
  /** p50 of `SPAWN_SAMPLES` sequential `execFile('/bin/true')` calls, ms (0.01 ms resolution). */
  spawnP50Ms: number;
}

/** The host conditions of one run, as written to its result JSON. */
export interface HostConditions {
  start: HostProbe;
  end: HostProbe;
  /** Steal over the whole run, % of all CPU time of all cores (0 where the hypervisor reports none). */
  stealPct: number;
  /** Busy CPU (everything but idle, iowait and steal) over the whole run, % of all cores. */
  busyPct: number;
}

interface CpuTimes {
  steal: number;
  idle: number;
  total: number;
}

/** The aggregate `cpu` line of /proc/stat (user nice system idle iowait irq softirq steal ...), in ticks. */
async function cpuTimes(): Promise<CpuTimes> {
  const line = (await readFile('/proc/stat', 'utf8')).split('\n')[0] ?? '';
  const f = line.trim().split(/\s+/).slice(1, 9).map(Number);
  const at = (i: number) => f[i] ?? 0;
  return { steal: at(7), idle: at(3) + at(4), total: f.reduce((a, b) => a + b, 0) };
}

async function probe(): Promise<HostProbe> {
  const samples: number[] = [];
  for (let i = 0; i < SPAWN_SAMPLES; i++) {
    const t0 = performance.now();
    await run('/bin/true');
    samples.push(performance.now() - t0);
  }
  samples.sort((a, b) => a - b);
  const loadAverage1m = Number((await readFile('/proc/loadavg', 'utf8')).split(' ')[0]);
  return {
    at: new Date().toISOString(),
    loadAverage1m,
    spawnP50Ms: Math.round(percentile(samples, 50) * 100) / 100,
  };
}

/**
 * Probes the host now; the returned `finish()` probes it again and returns both probes with steal and busy CPU in
 * between. Call `start` before the first timed row and `finish` after the last one.
 */
export async function startHostConditions(): Promise<{ finish: () => Promise<HostConditions> }> {
  const first = await probe();
  const before = await cpuTimes();
  return {
    finish: async () => {
      const after = await cpuTimes();
      const last = await probe();
      const total = Math.max(1, after.total - before.total);
      const pct = (x: number) => Math.round((x / total) * 1000) / 10;
      return {
        start: first,
        end: last,
        stealPct: pct(after.steal - before.steal),
        busyPct: pct(total - (after.idle - before.idle) - (after.steal - before.steal)),
      };
    },
  };
}
