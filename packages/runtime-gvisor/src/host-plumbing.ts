import { existsSync } from 'node:fs';
import { mkdir, open, readdir, readFile, rmdir, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { RuntimeError } from '@burrow/runtime';
import { CPU_PERIOD_US } from './oci-spec.js';
import { runCommand, tail } from './run-command.js';

/** Options of ext4 images: no reserved blocks, lazy init so mkfs of a large sparse file takes tens of ms. */
const MKFS_ARGS = ['-q', '-F', '-m', '0', '-E', 'lazy_itable_init=1,lazy_journal_init=1,nodiscard'];

/** Run a host tool; throw RuntimeError with its stderr when it fails. */
export async function mustRun(file: string, args: readonly string[], what: string): Promise<string> {
  const result = await runCommand(file, args);
  if (result.exitCode !== 0) {
    throw new RuntimeError(`${what} failed (exit ${result.exitCode ?? result.signal})`, tail(result.stderr));
  }
  return result.stdout;
}

/** Create a sparse file of `sizeMiB` and format it as ext4. */
export async function createDiskImage(imagePath: string, sizeMiB: number): Promise<void> {
  const handle = await open(imagePath, 'wx');
  try {
    await handle.truncate(sizeMiB * 1024 * 1024);
  } finally {
    await handle.close();
  }
  await mustRun('mkfs.ext4', [...MKFS_ARGS, imagePath], 'mkfs.ext4');
}

/** Mount an ext4 image through a new loop device (detached automatically on unmount). */
export async function mountDiskImage(imagePath: string, mountDir: string): Promise<void> {
  await mustRun('mount', ['-t', 'ext4', '-o', 'loop,nodev,nosuid', imagePath, mountDir], 'mounting the disk image');
}

/**
 * Mount an overlayfs with a read-only shared lower dir, `nosuid,nodev` like the disk under it: a setuid-root file or
 * a device node that code in a sandbox made (it is root there) must mean nothing to the host kernel, which would
 * otherwise honour it through this mount (the disk's own `nosuid` does not carry over to the overlay).
 */
export async function mountOverlay(options: {
  lowerDir: string;
  upperDir: string;
  workDir: string;
  mergedDir: string;
}): Promise<void> {
  for (const dir of [options.lowerDir, options.upperDir, options.workDir]) {
    if (/[,:\\]/.test(dir)) throw new RuntimeError(`overlay path contains a separator character: ${dir}`);
  }
  const data = `lowerdir=${options.lowerDir},upperdir=${options.upperDir},workdir=${options.workDir}`;
  await mustRun(
    'mount',
    ['-t', 'overlay', 'overlay', '-o', `nosuid,nodev,${data}`, options.mergedDir],
    'mounting the overlay',
  );
}

/** Mount points (from /proc/self/mountinfo) equal to or beneath `dir`, deepest first. */
export async function mountsUnder(dir: string): Promise<string[]> {
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  const prefix = dir.endsWith('/') ? dir : `${dir}/`;
  const points = text
    .split('\n')
    .map((line) => unescapeMountPath(line.split(' ')[4] ?? ''))
    .filter((point) => point === dir || point.startsWith(prefix));
  return [...new Set(points)].sort((a, b) => b.length - a.length);
}

function unescapeMountPath(path: string): string {
  return path.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(Number.parseInt(octal, 8)));
}

/**
 * Unmount everything beneath `dir`, deepest first. A busy mount falls back to a lazy unmount unless `lazy` is
 * false (then it stays mounted and the caller retries).
 */
export async function unmountAll(dir: string, options: { lazy?: boolean } = {}): Promise<void> {
  for (const point of await mountsUnder(dir)) {
    const result = await runCommand('umount', [point]);
    if (result.exitCode !== 0 && options.lazy !== false) await runCommand('umount', ['-l', point]);
  }
}

/** Loop devices (`/dev/loopN`) whose backing file lies beneath `dir`. */
export async function loopDevicesUnder(dir: string): Promise<string[]> {
  const prefix = dir.endsWith('/') ? dir : `${dir}/`;
  const devices: string[] = [];
  const names = await readdir('/sys/block').catch(() => [] as string[]);
  for (const name of names) {
    if (!name.startsWith('loop')) continue;
    const backing = await readFile(join('/sys/block', name, 'loop', 'backing_file'), 'utf8').catch(() => '');
    if (backing.startsWith(prefix)) devices.push(`/dev/${name}`);
  }
  return devices;
}

/** Detach every loop device backed by a file beneath `dir`. */
export async function detachLoopDevices(dir: string): Promise<void> {
  for (const device of await loopDevicesUnder(dir)) await runCommand('losetup', ['-d', device]);
}

/** Cgroup directories `<cgroupRoot>/<controller>/<parent>/<name>` that exist, over every mounted hierarchy. */
export async function cgroupDirs(cgroupRoot: string, parent: string, name: string): Promise<string[]> {
  const found: string[] = [];
  for (const controller of await readdir(cgroupRoot).catch(() => [] as string[])) {
    const dir = join(cgroupRoot, controller, parent, name);
    const exists = await readdir(dir).then(
      () => true,
      () => false,
    );
    if (exists) found.push(dir);
  }
  return found;
}

/**
 * Remove the cgroup `<parent>` from every hierarchy where it has no child cgroup and no process (the kernel
 * refuses to remove a busy one: EBUSY, left as it is).
 * @returns whether `<parent>` is gone from every hierarchy
 */
export async function removeEmptyCgroupParent(cgroupRoot: string, parent: string): Promise<boolean> {
  let gone = true;
  for (const controller of await readdir(cgroupRoot).catch(() => [] as string[])) {
    const dir = join(cgroupRoot, controller, parent);
    const code = await rmdir(dir).then(
      () => null,
      (error: NodeJS.ErrnoException) => error.code ?? 'unknown',
    );
    // ENOTDIR: a controller file (or a joined hierarchy's link), never a parent of ours.
    if (code !== null && code !== 'ENOENT' && code !== 'ENOTDIR') gone = false;
  }
  return gone;
}

/** Names of the child cgroups of `<parent>` in any hierarchy. */
export async function cgroupChildren(cgroupRoot: string, parent: string): Promise<string[]> {
  const names = new Set<string>();
  for (const controller of await readdir(cgroupRoot).catch(() => [] as string[])) {
    const entries = await readdir(join(cgroupRoot, controller, parent), { withFileTypes: true }).catch(() => []);
    for (const entry of entries) if (entry.isDirectory()) names.add(entry.name);
  }
  return [...names];
}

/**
 * Every cgroup directory named `sandboxId` under `<cgroupRoot>/<controller>/burrow/` or one level below it (any
 * instance's parent), whichever instance made it. For leak checks that must not trust the driver's own bookkeeping.
 */
export async function findSandboxCgroups(cgroupRoot: string, sandboxId: string): Promise<string[]> {
  const found = await cgroupDirs(cgroupRoot, 'burrow', sandboxId);
  for (const instance of await cgroupChildren(cgroupRoot, 'burrow')) {
    found.push(...(await cgroupDirs(cgroupRoot, join('burrow', instance), sandboxId)));
  }
  return found;
}

/** Host pids listed in a cgroup's `cgroup.procs` (empty when the cgroup is gone). */
async function cgroupPids(cgroupDir: string): Promise<number[]> {
  const text = await readFile(join(cgroupDir, 'cgroup.procs'), 'utf8').catch(() => '');
  return text
    .split('\n')
    .map((line) => Number.parseInt(line, 10))
    .filter((pid) => Number.isInteger(pid) && pid > 1);
}

/** Whether a host process exists and has not exited (a zombie has: its files are closed). */
export async function processAlive(pid: number): Promise<boolean> {
  if (pid <= 0) return false;
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
  if (stat === null) return false;
  const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  return state !== 'Z' && state !== 'X';
}

/**
 * SIGKILL every process in a cgroup (`cgroup.procs`) and wait until it is empty, up to `waitMs` (a sentry can take
 * a moment to exit, and its cgroups cannot be removed before); a missing cgroup is fine.
 * @param waitMs longest wait for the processes to exit, ms. @default 5000
 */
export async function killCgroupProcesses(cgroupDir: string, waitMs = 5000): Promise<void> {
  const deadline = Date.now() + waitMs;
  for (let pids = await cgroupPids(cgroupDir); pids.length > 0; pids = await cgroupPids(cgroupDir)) {
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    if (Date.now() >= deadline) return;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A host process of a sandbox's runtime: the gVisor sentry (`runsc boot`), its gofer, or another (a runsc CLI). */
export interface RuntimeProcess {
  pid: number;
  role: 'sentry' | 'gofer' | 'other';
}

/**
 * The host processes in a sandbox's pids cgroup (`pidsCgroupDir`), each with its role read from its argv (`boot`:
 * the sentry, `gofer`: the file server).
 * @returns an empty list when the cgroup is unreadable or gone
 */
export async function runtimeProcesses(pidsCgroupDir: string): Promise<RuntimeProcess[]> {
  const text = await readFile(join(pidsCgroupDir, 'cgroup.procs'), 'utf8').catch(() => '');
  const found: RuntimeProcess[] = [];
  for (const line of text.split('\n')) {
    const pid = Number.parseInt(line, 10);
    if (!Number.isInteger(pid) || pid <= 1) continue;
    const argv = (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).split('\0');
    found.push({ pid, role: argv.includes('boot') ? 'sentry' : argv.includes('gofer') ? 'gofer' : 'other' });
  }
  return found;
}

/**
 * Whether the gofer of a running sandbox is gone: its pids cgroup (`pidsCgroupDir`) holds the sentry
 * (`sentryPid`) but no process with a `gofer` argument. Without a gofer the sentry can open no file (every exec
 * fails) though runsc still reports it running.
 * @returns false when it cannot tell (the cgroup is unreadable or does not hold the sentry)
 */
export async function goferGone(pidsCgroupDir: string, sentryPid: number): Promise<boolean> {
  const processes = await runtimeProcesses(pidsCgroupDir);
  if (!processes.some((p) => p.pid === sentryPid)) return false;
  return !processes.some((p) => p.pid !== sentryPid && p.role === 'gofer');
}

/**
 * Remove cgroup directories. One whose last tasks are still exiting refuses with EBUSY for a moment: retried for
 * up to `waitMs` (default 2000). Other errors are left for the caller's verification.
 */
export async function removeCgroupDirs(dirs: readonly string[], waitMs = 2000): Promise<void> {
  const deadline = Date.now() + waitMs;
  for (const dir of dirs) {
    for (;;) {
      const code = await rmdir(dir).then(
        () => null,
        (error: NodeJS.ErrnoException) => error.code ?? 'unknown',
      );
      if (code !== 'EBUSY' || Date.now() >= deadline) break;
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

/**
 * Set the CPU quota of the running container `<parent>/<name>` to `cpuCount` CPUs (`cpuCount` × {@link CPU_PERIOD_US}
 * per period): `cpu.cfs_quota_us` in the v1 `cpu` hierarchy, else `cpu.max` in a v2 (unified) one.
 * @throws RuntimeError when neither exists or the write fails (the sandbox would run without its limit)
 */
export async function setCpuQuota(cgroupRoot: string, parent: string, name: string, cpuCount: number): Promise<void> {
  const quotaUs = Math.round(cpuCount * CPU_PERIOD_US);
  const v1 = join(cgroupRoot, 'cpu', parent, name);
  const attempts: Array<[string, string]> = [
    [join(v1, 'cpu.cfs_quota_us'), String(quotaUs)],
    [join(cgroupRoot, parent, name, 'cpu.max'), `${quotaUs} ${CPU_PERIOD_US}`],
  ];
  const errors: string[] = [];
  for (const [file, value] of attempts) {
    try {
      await writeFile(file, value);
      return;
    } catch (error) {
      errors.push(`${file}: ${(error as NodeJS.ErrnoException).code ?? String(error)}`);
    }
  }
  throw new RuntimeError(`setting the CPU limit of ${name} failed`, errors.join('\n'));
}

/**
 * Make the v1 cpuset cgroups of `parent` (each level) and give each the CPUs and memory nodes of the level above
 * when it has none: a new v1 cpuset cgroup starts empty, and runsc's write of a container's own cpuset under an
 * empty parent fails (EACCES: not a subset). A host without a v1 cpuset hierarchy has nothing to prepare.
 */
export async function prepareCpusetParent(cgroupRoot: string, parent: string): Promise<void> {
  let above = join(cgroupRoot, 'cpuset');
  if (!existsSync(above)) return;
  for (const level of parent.split('/').filter((p) => p !== '')) {
    const dir = join(above, level);
    await mkdir(dir, { recursive: true });
    for (const file of ['cpuset.cpus', 'cpuset.mems']) {
      if ((await readFile(join(dir, file), 'utf8')).trim() !== '') continue;
      await writeFile(join(dir, file), (await readFile(join(above, file), 'utf8')).trim());
    }
    above = dir;
  }
}

/**
 * Let the running container `<parent>/<name>` use every CPU its parent may (v1 `cpuset` hierarchy; the CPU quota
 * is what limits it). A host without a v1 cpuset hierarchy has nothing to open.
 * @throws RuntimeError when the write fails
 */
export async function openCpuset(cgroupRoot: string, parent: string, name: string): Promise<void> {
  const dir = join(cgroupRoot, 'cpuset', parent, name);
  const all = await readFile(join(cgroupRoot, 'cpuset', parent, 'cpuset.cpus'), 'utf8').catch(() => null);
  if (all === null || !existsSync(dir)) return;
  try {
    await writeFile(join(dir, 'cpuset.cpus'), all.trim());
  } catch (error) {
    throw new RuntimeError(`opening the cpuset of ${name} failed`, String(error));
  }
}

/** The `oom_kill` counter of a v1 memory cgroup, or null when the cgroup does not exist. */
export async function readOomKillCount(memoryCgroupDir: string): Promise<number | null> {
  const text = await readFile(join(memoryCgroupDir, 'memory.oom_control'), 'utf8').catch(() => null);
  const match = text?.match(/^oom_kill (\d+)$/m);
  return match?.[1] === undefined ? null : Number.parseInt(match[1], 10);
}

/**
 * Make the host OOM killer pick the guest's stub processes (one per guest address space, children of the
 * sentry) before the sentry or gofer: a memory-cgroup OOM then kills the offending guest process, not the
 * whole sandbox. New stubs are cloned from existing ones and inherit the score.
 */
export async function preferStubsForOomKill(sentryPid: number): Promise<void> {
  // Concurrently: a sentry has dozens of threads, and one read after another cost up to 0.3 s of a loaded resume.
  await Promise.all(
    (await descendants(sentryPid)).map(async (pid) => {
      const path = `/proc/${pid}/oom_score_adj`;
      const current = await readFile(path, 'utf8').catch(() => null);
      if (current !== null && current.trim() !== '1000') await writeText(path, '1000');
    }),
  );
}

async function descendants(pid: number): Promise<number[]> {
  const result: number[] = [];
  const queue = [pid];
  while (queue.length > 0) {
    const next = queue.shift() as number;
    const tids = await readdir(`/proc/${next}/task`).catch(() => [] as string[]);
    const lists = await Promise.all(
      tids.map((tid) => readFile(`/proc/${next}/task/${tid}/children`, 'utf8').catch(() => '')),
    );
    for (const children of lists) {
      for (const child of children.split(' ').filter(Boolean)) {
        const childPid = Number.parseInt(child, 10);
        result.push(childPid);
        queue.push(childPid);
      }
    }
  }
  return result;
}

async function writeText(path: string, text: string): Promise<void> {
  const handle = await open(path, 'w').catch(() => null);
  if (!handle) return;
  await handle.writeFile(text).catch(() => undefined);
  await handle.close();
}

/** Whether `path` exists (a file that can be opened, or anything `stat` sees). */
export async function fileExists(path: string): Promise<boolean> {
  const handle = await open(path, 'r').catch(() => null);
  if (!handle)
    return stat(path).then(
      () => true,
      () => false,
    );
  await handle.close();
  return true;
}
