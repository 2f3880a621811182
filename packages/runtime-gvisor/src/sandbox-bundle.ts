import { chmod, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { type CreateOptions, RuntimeError } from '@burrow/runtime';
import { AGENT_GUEST_DIR, installAgent } from './agent-binary.js';
import type { AgentExec } from './agent-exec.js';
import {
  createDiskImage,
  detachLoopDevices,
  fileExists,
  mountDiskImage,
  mountOverlay,
  mountsUnder,
  mustRun,
  prepareCpusetParent,
  setCpuQuota,
  unmountAll,
} from './host-plumbing.js';
import { buildOciSpec, TMP_MEMORY_SHARE } from './oci-spec.js';
import { abortError } from './run-command.js';
import type { GvisorPlatform } from './runsc-cli.js';
import type { SandboxCgroups } from './sandbox-cgroups.js';
import type { SandboxPaths } from './sandbox-paths.js';
import { SPAWNER_ARGV } from './spawner.js';

/** Annotation of a sandbox's bundle: its own CPU limit (CPUs), which afterStart sets once runsc has started it. */
const CPU_COUNT_ANNOTATION = 'dev.burrow.cpu-count';
/** The part of a bundle's config.json that {@link enforceRecordedCpuLimit} reads. */
type OciAnnotated = { annotations?: Record<string, string> };

/** Where the next sandbox's boot cpuset starts, so that boots spread over the host's CPUs. */
let nextBootCpu = 0;

/**
 * The cpuset a sandbox of `cpuCount` CPUs boots in: ceil(cpuCount) host CPUs (at most all of them), starting at a
 * rotating CPU, as a cpuset list (`1` or `0-1` or `3,0`).
 */
export function bootCpus(cpuCount: number, hostCpus = availableParallelism()): string {
  const count = Math.min(hostCpus, Math.max(1, Math.ceil(cpuCount)));
  const first = nextBootCpu % hostCpus;
  nextBootCpu = (first + count) % hostCpus;
  const cpus = Array.from({ length: count }, (_, i) => (first + i) % hostCpus).sort((a, b) => a - b);
  return cpus.join(',');
}

/** CPUs a container may use while runsc boots or restores it: all of the host's (its own limit is set after). */
const BOOT_CPU_COUNT = availableParallelism();

/** What {@link prepareBundle} needs from the driver. */
export interface BundleDeps {
  paths(sandboxId: string): SandboxPaths;
  cgroups: SandboxCgroups;
  agents: AgentExec;
  platform: GvisorPlatform;
  /** `GvisorDriverOptions.maxProcesses`. */
  maxProcesses: number;
  /** The network namespace a sandbox with a network runs in (absent: runsc's `--network=none`). */
  netnsPath?: ((sandboxId: string) => string) | undefined;
}

/** Host pids limit: systrap needs about 2 host tasks per guest process, ptrace about 9; doubled for headroom under a fork bomb. */
function pidsLimit(platform: GvisorPlatform, processLimit: number): number {
  return (platform === 'systrap' ? 4 : 10) * processLimit + 128;
}

/**
 * RLIMIT_NPROC inside: `maxProcesses`, but at most one process per 2 MiB of the memory limit (at least 64), so a
 * fork bomb hits the graceful process cap before it exhausts memory and the host OOM killer ends the sandbox.
 */
function processLimit(maxProcesses: number, memoryMiB: number): number {
  return Math.min(maxProcesses, Math.max(64, Math.floor(memoryMiB / 2)));
}

/**
 * Mount the sandbox's disk (making it if absent) and overlay, and write its OCI bundle; each step done is pushed
 * onto `made` as its undo. Shared by create, resume, fork and snapshot restores.
 */
export async function prepareBundle(
  deps: BundleDeps,
  options: CreateOptions,
  made: Array<() => Promise<void>>,
): Promise<void> {
  const { sandboxId } = options;
  const paths = deps.paths(sandboxId);
  const lower = await stat(options.template.rootfsDir).catch(() => null);
  if (!lower?.isDirectory()) {
    throw new RuntimeError(`template root filesystem not found: ${options.template.rootfsDir}`);
  }
  const dirExisted = await stat(paths.dir).then(
    () => true,
    () => false,
  );
  if (!dirExisted) made.push(() => rm(paths.dir, { recursive: true, force: true }));
  await mkdir(paths.logsDir, { recursive: true });
  await mkdir(paths.diskDir, { recursive: true });
  await mkdir(paths.rootfs, { recursive: true });
  await installAgent(await deps.agents.build(), paths.agentDir);
  if (!(await fileExists(paths.image))) {
    made.push(() => rm(paths.image, { force: true }));
    await createDiskImage(paths.image, options.resources.diskMiB);
  }
  if (options.signal?.aborted) throw abortError(options.signal);
  if ((await mountsUnder(paths.diskDir)).length === 0) {
    made.push(async () => {
      await unmountAll(paths.diskDir);
      await detachLoopDevices(paths.dir);
    });
    await mountDiskImage(paths.image, paths.diskDir);
  }
  await mkdir(paths.upperDir, { recursive: true });
  await mkdir(paths.workDir, { recursive: true });
  if ((await mountsUnder(paths.rootfs)).length === 0) {
    made.push(() => unmountAll(paths.rootfs));
    await mountOverlay({
      lowerDir: options.template.rootfsDir,
      upperDir: paths.upperDir,
      workDir: paths.workDir,
      mergedDir: paths.rootfs,
    });
  }
  // The mount point of /tmp's tmpfs (the disk's own /tmp is not seen inside).
  await mkdir(join(paths.rootfs, 'tmp'), { recursive: true });
  await chmod(join(paths.rootfs, 'tmp'), 0o1777);
  const hasTini = await fileExists(join(options.template.rootfsDir, 'usr/bin/tini'));
  const spec = buildOciSpec({
    rootPath: paths.rootfs,
    hostname: options.hostname,
    args: hasTini ? ['/usr/bin/tini', '-s', '--', ...SPAWNER_ARGV] : SPAWNER_ARGV,
    // Deleted-but-open files are saved by a checkpoint only on gVisor's own tmpfs (docs/adr/0005).
    tmpfs: [{ destination: '/tmp', sizeMiB: Math.max(1, Math.floor(options.resources.memoryMiB * TMP_MEMORY_SHARE)) }],
    mounts: [
      // The exec agent and its host socket (docs/adr/0003); read-only: the sandbox can connect, not tamper.
      { source: paths.agentDir, destination: AGENT_GUEST_DIR, readonly: true },
      ...(await volumeBinds(paths.diskDir, options, made)),
    ],
    limits: {
      cgroupsPath: `/${deps.cgroups.parent}/${sandboxId}`,
      memoryMiB: options.resources.memoryMiB,
      // Boot and restore on every host CPU; afterStart sets the sandbox's own limit once it runs. Under its limit
      // (1 CPU by default) runsc's restore work runs in the sandbox's cgroup: raw `runsc restore` of the same
      // image takes 568 ms p50 with a 1-CPU quota against 392 without and 420 with 2 CPUs (8 alternating cycles
      // each, docs/adr/0002).
      cpuCount: BOOT_CPU_COUNT,
      // The sentry counts its CPUs once, from the cpuset it starts in (runsc's --cpu-num-from-quota never goes
      // below 2, and reads the boot quota): start on as many CPUs as the sandbox has, so that `nproc` and
      // sysconf inside say cpuCount; afterStart opens the cpuset to every host CPU again (the quota limits).
      cpus: bootCpus(options.resources.cpuCount),
      processLimit: processLimit(deps.maxProcesses, options.resources.memoryMiB),
      pidsLimit: pidsLimit(deps.platform, processLimit(deps.maxProcesses, options.resources.memoryMiB)),
    },
    ...(deps.netnsPath === undefined ? {} : { networkNamespacePath: deps.netnsPath(sandboxId) }),
    // The limit afterStart sets, for settle to set again after a crash between runsc's start and afterStart.
    annotations: { [CPU_COUNT_ANNOTATION]: String(options.resources.cpuCount) },
  });
  await writeFile(join(paths.dir, 'config.json'), `${JSON.stringify(spec, null, 2)}\n`);
  await prepareCpusetParent(deps.cgroups.root, deps.cgroups.parent);
  // Listen before the container starts, so the agent's first connect succeeds.
  deps.agents.forgetAbsence(sandboxId);
  if (await deps.agents.listen(sandboxId).catch(() => false)) made.push(() => deps.agents.hub.close(sandboxId));
}

/**
 * Set the CPU limit recorded in the running container's bundle in `bundleDir` ({@link CPU_COUNT_ANNOTATION}), if it
 * has one.
 */
export async function enforceRecordedCpuLimit(
  cgroups: SandboxCgroups,
  bundleDir: string,
  sandboxId: string,
): Promise<void> {
  const spec = await readFile(join(bundleDir, 'config.json'), 'utf8').catch(() => null);
  const recorded = spec === null ? undefined : (JSON.parse(spec) as OciAnnotated).annotations?.[CPU_COUNT_ANNOTATION];
  const cpuCount = Number(recorded);
  if (recorded !== undefined && Number.isFinite(cpuCount) && cpuCount > 0) {
    await setCpuQuota(cgroups.root, cgroups.parent, sandboxId, cpuCount);
  }
}

/**
 * The spec's bind mounts of the sandbox's volumes. A read-only one is bound through a read-only host bind under the
 * disk's mount (`<disk>/volume-binds/<n>`, released with the disk at a pause, stop or delete): a restore keeps the
 * mount flags its image recorded, so a child restored from a read-write parent with the volume read-only would
 * otherwise write through; the host's EROFS holds whatever the sandbox's kernel believes.
 */
async function volumeBinds(
  diskDir: string,
  options: CreateOptions,
  made: Array<() => Promise<void>>,
): Promise<Array<{ source: string; destination: string; readonly: boolean }>> {
  const binds: Array<{ source: string; destination: string; readonly: boolean }> = [];
  for (const [index, volume] of (options.volumes ?? []).entries()) {
    if (!volume.readOnly) {
      binds.push({ source: volume.hostPath, destination: volume.path, readonly: false });
      continue;
    }
    const at = join(diskDir, 'volume-binds', String(index));
    if ((await mountsUnder(at)).length === 0) {
      await mkdir(at, { recursive: true });
      made.push(() => unmountAll(at));
      await mustRun('mount', ['--bind', volume.hostPath, at], 'binding a volume');
      await mustRun('mount', ['-o', 'remount,bind,ro,nosuid,nodev', at], 'making a volume bind read-only');
    }
    binds.push({ source: at, destination: volume.path, readonly: true });
  }
  return binds;
}
