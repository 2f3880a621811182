/**
 * Issue 7's density figures (`npm run bench -- --density`): how many idle running and paused sandboxes this host
 * holds, and what each costs in host memory.
 *
 * - Idle running: PSS of every host process in the sandbox's pids cgroup (sentry, gofer, stubs; from
 *   /proc/PID/smaps_rollup) and the sandbox memory cgroup's `memory.usage_in_bytes` (includes its page cache).
 * - Paused: a paused sandbox has no process; its cost is the server's RSS growth and kernel memory (Slab, page
 *   tables, kernel stacks from /proc/meminfo) per paused sandbox, plus its disk (image + pause image, reported).
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Sandbox } from '@burrow/sdk';

/**
 * V8's full garbage collection, for the server-memory readings (the bench runs the server in its own process): without
 * it the RSS growth per paused sandbox can read negative (-7 KiB in one run), the heap having shrunk in between. The flag is
 * set at run time (`v8.setFlagsFromString`), and a context made after it sees the `gc` global.
 */
function collectGarbage(): void {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  gc();
  gc();
}

/** What the density run found. */
export interface DensityResult {
  running: {
    target: number;
    reached: number;
    /** Per sandbox, MiB: p50 of PSS of its host processes. */
    pssMiBp50: number;
    pssMiBmax: number;
    /** Per sandbox, MiB: p50 of its memory cgroup usage. */
    cgroupMiBp50: number;
    /** MemAvailable drop per running sandbox, MiB. */
    memAvailableDropMiBPer: number;
  };
  paused: {
    target: number;
    reached: number;
    /** Server RSS growth per paused sandbox, KiB (after a full GC at both ends). */
    serverRssKiBPer: number;
    /**
     * JS heap growth of the bench process per paused sandbox, KiB, after a full GC at both ends (absent in older
     * result files). The bench runs the server in its own process, so this also holds the run's SDK handles (one
     * `Sandbox` object per sandbox): an upper bound of the server's share.
     */
    serverHeapKiBPer?: number;
    /** Kernel memory (Slab + PageTables + KernelStack) growth per paused sandbox, KiB. */
    kernelKiBPer: number;
    /** Disk used per paused sandbox (disk image blocks + pause image), MiB. */
    diskMiBPer: number;
  };
  /**
   * Both loads held at once (absent in older result files, whose runs paused the running ones to make up the
   * paused count): what the API listed with every sandbox of the run created, and whether a sample of each still works.
   */
  simultaneous?: {
    /** Sandboxes of this run the API listed as `running` / `paused` at that moment. */
    listedRunning: number;
    listedPaused: number;
    /** `cat /proc/loadavg` (1-minute figure) with every sandbox held. */
    loadAverage1m: number;
    /** Exec round trip of `true` on one running sandbox with every sandbox held, p50 of 20, ms. */
    execP50Ms: number;
    /** Paused sandboxes resumed (and checked with an exec), then paused again, with the running ones still up. */
    resumedOk: number;
    resumedTried: number;
  };
  failures: string[];
}

async function meminfoKiB(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const line of (await readFile('/proc/meminfo', 'utf8')).split('\n')) {
    const m = /^(\w+):\s+(\d+)/.exec(line);
    if (m) out[m[1] as string] = Number(m[2]);
  }
  return out;
}

const kernelKiB = (m: Record<string, number>) => (m.Slab ?? 0) + (m.PageTables ?? 0) + (m.KernelStack ?? 0);

async function pssKiB(pid: string): Promise<number> {
  const text = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => '');
  return Number(/^Pss:\s+(\d+)/m.exec(text)?.[1] ?? 0);
}

/** The cgroup dir `<root>/<controller>/burrow/<instance>/<id>` of a sandbox (found by searching the instance dirs). */
async function cgroupDir(controller: string, sandboxId: string): Promise<string | null> {
  const base = join('/sys/fs/cgroup', controller, 'burrow');
  for (const instance of await readdir(base).catch(() => [] as string[])) {
    const dir = join(base, instance, sandboxId);
    if ((await readdir(dir).catch(() => null)) !== null) return dir;
  }
  return null;
}

async function sandboxMemory(sandboxId: string): Promise<{ pssKiB: number; cgroupKiB: number }> {
  const pids = await cgroupDir('pids', sandboxId);
  let pss = 0;
  if (pids !== null) {
    const procs = (await readFile(join(pids, 'cgroup.procs'), 'utf8').catch(() => '')).split('\n').filter(Boolean);
    for (const pid of procs) pss += await pssKiB(pid);
  }
  const mem = await cgroupDir('memory', sandboxId);
  const usage = mem === null ? 0 : Number(await readFile(join(mem, 'memory.usage_in_bytes'), 'utf8').catch(() => 0));
  return { pssKiB: pss, cgroupKiB: usage / 1024 };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
const r1 = (x: number) => Math.round(x * 10) / 10;

/**
 * Create and pause `paused` sandboxes, then create `running` idle ones next to them, so that both loads are held at
 * the same moment; prove it with the API's listing, an exec round trip and a few resumes under that load. Everything
 * it created is deleted at the end.
 */
export async function benchDensity(
  conn: { apiUrl: string; apiKey: string },
  options: {
    running: number;
    paused: number;
    dataDir: string;
    serverPid: number;
    log: (message: string) => void;
  },
): Promise<DensityResult> {
  const { log } = options;
  const failures: string[] = [];
  const all: Sandbox[] = [];
  const label = { bench: `density-${Date.now()}` };
  const rssKiB = async () => {
    collectGarbage();
    return Number(/^VmRSS:\s+(\d+)/m.exec(await readFile(`/proc/${options.serverPid}/status`, 'utf8'))?.[1] ?? 0);
  };
  const heapKiB = () => process.memoryUsage().heapUsed / 1024;
  const settle = () => new Promise((resolve) => setTimeout(resolve, 5000));
  try {
    // Paused sandboxes first (each one ran a command before its pause).
    const rssBefore = await rssKiB();
    const heapBefore = heapKiB();
    const kernelBefore = kernelKiB(await meminfoKiB());
    const diskBefore = await diskUsedKiB(options.dataDir);
    const pausedOnes: Sandbox[] = [];
    for (let i = 0; i < options.paused; i++) {
      if (i % 20 === 0) log(`density: paused ${i + 1}/${options.paused}`);
      try {
        const sandbox = await Sandbox.create({ ...conn, template: 'base', timeoutMs: null, labels: label });
        all.push(sandbox);
        await sandbox.commands.run(['true'], { check: true });
        await sandbox.pause();
        pausedOnes.push(sandbox);
      } catch (error) {
        failures.push(`paused #${i}: ${(error as Error).message}`);
        break;
      }
    }
    await settle();
    const n = Math.max(1, pausedOnes.length);
    const paused = {
      target: options.paused,
      reached: pausedOnes.length,
      serverRssKiBPer: Math.round(((await rssKiB()) - rssBefore) / n),
      serverHeapKiBPer: Math.round((heapKiB() - heapBefore) / n),
      kernelKiBPer: Math.round((kernelKiB(await meminfoKiB()) - kernelBefore) / n),
      diskMiBPer: r1(((await diskUsedKiB(options.dataDir)) - diskBefore) / 1024 / n),
    };
    log(`density: paused ${JSON.stringify(paused)}`);

    // Idle running sandboxes next to them.
    const before = await meminfoKiB();
    const runningOnes: Sandbox[] = [];
    for (let i = 0; i < options.running; i++) {
      if (i % 10 === 0) log(`density: running ${i + 1}/${options.running}`);
      try {
        const sandbox = await Sandbox.create({ ...conn, template: 'base', timeoutMs: null, labels: label });
        all.push(sandbox);
        await sandbox.commands.run(['true'], { check: true });
        runningOnes.push(sandbox);
      } catch (error) {
        failures.push(`running #${i}: ${(error as Error).message}`);
        break;
      }
    }
    await settle();
    const after = await meminfoKiB();
    const per = await Promise.all(runningOnes.map((s) => sandboxMemory(s.id)));
    const running = {
      target: options.running,
      reached: runningOnes.length,
      pssMiBp50: r1(median(per.map((p) => p.pssKiB)) / 1024),
      pssMiBmax: r1(Math.max(0, ...per.map((p) => p.pssKiB)) / 1024),
      cgroupMiBp50: r1(median(per.map((p) => p.cgroupKiB)) / 1024),
      memAvailableDropMiBPer: r1(
        ((before.MemAvailable ?? 0) - (after.MemAvailable ?? 0)) / 1024 / Math.max(1, runningOnes.length),
      ),
    };
    log(`density: running ${JSON.stringify(running)}`);

    // Both held at once: what the API lists, and whether sandboxes still answer under that load.
    const listed = { running: 0, paused: 0 };
    for await (const sandbox of Sandbox.listAll({ ...conn, labels: label, limit: 200 })) {
      if (sandbox.info.state === 'running') listed.running++;
      if (sandbox.info.state === 'paused') listed.paused++;
    }
    const loadAverage1m = Number((await readFile('/proc/loadavg', 'utf8')).split(' ')[0]);
    const execMs: number[] = [];
    const probe = runningOnes.at(-1);
    for (let i = 0; probe !== undefined && i < 20; i++) {
      const started = performance.now();
      await probe.commands.run(['true'], { check: true });
      execMs.push(performance.now() - started);
    }
    let resumedOk = 0;
    const sample = pausedOnes.filter((_, i) => i % Math.max(1, Math.floor(pausedOnes.length / 5)) === 0).slice(0, 5);
    for (const sandbox of sample) {
      try {
        await sandbox.resume();
        await sandbox.commands.run(['true'], { check: true });
        await sandbox.pause();
        resumedOk++;
      } catch (error) {
        failures.push(`resume under load ${sandbox.id}: ${(error as Error).message}`);
      }
    }
    const simultaneous = {
      listedRunning: listed.running,
      listedPaused: listed.paused,
      loadAverage1m,
      execP50Ms: r1(median(execMs)),
      resumedOk,
      resumedTried: sample.length,
    };
    log(`density: both at once ${JSON.stringify(simultaneous)}`);
    return { running, paused, simultaneous, failures };
  } finally {
    log(`density: deleting ${all.length} sandboxes`);
    const queue = [...all];
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        for (let s = queue.shift(); s !== undefined; s = queue.shift()) await s.delete().catch(() => undefined);
      }),
    );
  }
}

/** Disk blocks under `dir`, KiB; `-x` stays off the sandboxes' mounted overlays (each a whole template tree). */
async function diskUsedKiB(dir: string): Promise<number> {
  const { execFile } = await import('node:child_process');
  return new Promise((resolve) => {
    execFile('du', ['-skx', dir], (error, stdout) => resolve(error ? 0 : Number(stdout.split('\t')[0])));
  });
}
