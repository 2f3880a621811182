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
import { Sandbox } from '@burrow/sdk';

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
    /** Server RSS growth per paused sandbox, KiB. */
    serverRssKiBPer: number;
    /** Kernel memory (Slab + PageTables + KernelStack) growth per paused sandbox, KiB. */
    kernelKiBPer: number;
    /** Disk used per paused sandbox (disk image blocks + pause image), MiB. */
    diskMiBPer: number;
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
 * Create `running` idle sandboxes and measure them; then pause them and create more, pausing each, up to `paused`.
 * Everything it created is deleted at the end.
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
  const rssKiB = async () =>
    Number(/^VmRSS:\s+(\d+)/m.exec(await readFile(`/proc/${options.serverPid}/status`, 'utf8'))?.[1] ?? 0);
  try {
    // Idle running sandboxes.
    const before = await meminfoKiB();
    for (let i = 0; i < options.running; i++) {
      if (i % 10 === 0) log(`density: running ${i + 1}/${options.running}`);
      try {
        const sandbox = await Sandbox.create({ ...conn, template: 'base', timeoutMs: null });
        await sandbox.commands.run(['true'], { check: true });
        all.push(sandbox);
      } catch (error) {
        failures.push(`running #${i}: ${(error as Error).message}`);
        break;
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 5000));
    const after = await meminfoKiB();
    const per = await Promise.all(all.map((s) => sandboxMemory(s.id)));
    const running = {
      target: options.running,
      reached: all.length,
      pssMiBp50: r1(median(per.map((p) => p.pssKiB)) / 1024),
      pssMiBmax: r1(Math.max(0, ...per.map((p) => p.pssKiB)) / 1024),
      cgroupMiBp50: r1(median(per.map((p) => p.cgroupKiB)) / 1024),
      memAvailableDropMiBPer: r1(
        ((before.MemAvailable ?? 0) - (after.MemAvailable ?? 0)) / 1024 / Math.max(1, all.length),
      ),
    };
    log(`density: running ${JSON.stringify(running)}`);

    // Paused: pause the running ones, then create and pause more up to the target.
    const rssBefore = await rssKiB();
    const kernelBefore = kernelKiB(await meminfoKiB());
    const diskBefore = await diskUsedKiB(options.dataDir);
    let pausedCount = 0;
    for (const sandbox of all) {
      try {
        await sandbox.pause();
        pausedCount++;
      } catch (error) {
        failures.push(`pause ${sandbox.id}: ${(error as Error).message}`);
      }
    }
    // The ones paused so far were measured running first: the baseline for per-paused cost is taken again here.
    const rssMid = await rssKiB();
    const kernelMid = kernelKiB(await meminfoKiB());
    const diskMid = await diskUsedKiB(options.dataDir);
    const extra: Sandbox[] = [];
    for (let i = pausedCount; i < options.paused; i++) {
      if (i % 10 === 0) log(`density: paused ${i + 1}/${options.paused}`);
      try {
        const sandbox = await Sandbox.create({ ...conn, template: 'base', timeoutMs: null });
        all.push(sandbox);
        await sandbox.commands.run(['true'], { check: true });
        await sandbox.pause();
        extra.push(sandbox);
        pausedCount++;
      } catch (error) {
        failures.push(`paused #${i}: ${(error as Error).message}`);
        break;
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 5000));
    const rssAfter = await rssKiB();
    const kernelAfter = kernelKiB(await meminfoKiB());
    const diskAfter = await diskUsedKiB(options.dataDir);
    const n = Math.max(1, extra.length);
    const paused = {
      target: options.paused,
      reached: pausedCount,
      serverRssKiBPer: Math.round((rssAfter - rssMid) / n),
      kernelKiBPer: Math.round((kernelAfter - kernelMid) / n),
      diskMiBPer: r1((diskAfter - diskMid) / 1024 / n),
    };
    log(
      `density: paused ${JSON.stringify(paused)} (pausing the first ${all.length - extra.length}: RSS ${rssMid - rssBefore} KiB, kernel ${kernelMid - kernelBefore} KiB, disk ${diskMid - diskBefore} KiB)`,
    );
    return { running, paused, failures };
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
