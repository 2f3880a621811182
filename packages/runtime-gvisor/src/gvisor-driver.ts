import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, lstat, mkdir, open, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { availableParallelism } from 'node:os';
import { join, resolve } from 'node:path';
import { SandboxIdSchema } from '@burrow/contract';
import {
  type Capability,
  type CheckpointInfo,
  type CreateFromSnapshotOptions,
  type CreateOptions,
  type DiskInspection,
  type ExecOptions,
  type ForkOptions,
  type HostResourceKind,
  type HostResources,
  type InspectDiskOptions,
  type ObservedSandbox,
  type RuntimeDriver,
  RuntimeError,
  type RuntimeEvent,
  type SandboxProcess,
  type SnapshotOptions,
  type SpawnOptions,
} from '@burrow/runtime';
import { AGENT_GUEST_DIR, type AgentBuild, buildAgent, installAgent } from './agent-binary.js';
import { AgentHub, AgentStartError } from './agent-hub.js';
import { explainBlockers, HostSocketOpenError } from './checkpoint-blockers.js';
import { inspectSandboxDisk, releaseInspectMount } from './disk-inspect.js';
import { ExecExitReasons } from './exec-exit-reason.js';
import { ensureGuestIdentity } from './guest-identity-files.js';
import { GvisorCheckpointer } from './gvisor-checkpoint.js';
import { assertNoHostFds, clearRunscExecMark, markRunscExec } from './host-fd-scan.js';
import {
  cgroupChildren,
  cgroupDirs,
  createDiskImage,
  detachLoopDevices,
  goferGone,
  killCgroupProcesses,
  loopDevicesUnder,
  mountDiskImage,
  mountOverlay,
  mountsUnder,
  openCpuset,
  preferStubsForOomKill,
  prepareCpusetParent,
  readOomKillCount,
  removeCgroupDirs,
  removeEmptyCgroupParent,
  setCpuQuota,
  unmountAll,
} from './host-plumbing.js';
import { ImageEncryption, type ImageKey } from './image-encryption.js';
import { buildOciSpec, TMP_MEMORY_SHARE } from './oci-spec.js';
import { abortError, tail } from './run-command.js';
import { type GvisorPlatform, RunscCli } from './runsc-cli.js';
import { startSandboxProcess } from './sandbox-process.js';
import { SPAWNER_ARGV, spawnRequestArgv } from './spawner.js';

/** Parent cgroup of every sandbox: `/burrow/<sandboxId>` in each v1 hierarchy. */
/** Parent of every Burrow instance's cgroups; each instance (data dir) has its own child, see `cgroupParent`. */
const CGROUP_PARENT = 'burrow';
/** See {@link GvisorDriverOptions.cgroupOwnersDir}. */
const DEFAULT_CGROUP_OWNERS_DIR = '/run/burrow/cgroup-parents';

/** The 12 hex of an instance's cgroup parent `burrow/<hash>`: sha256 of its data dir's absolute path. */
export function cgroupParentHash(dataDir: string): string {
  return createHash('sha256').update(resolve(dataDir)).digest('hex').slice(0, 12);
}

/** Annotation of a sandbox's bundle: its own CPU limit (CPUs), which afterStart sets once runsc has started it. */
const CPU_COUNT_ANNOTATION = 'dev.burrow.cpu-count';
/** The part of a bundle's config.json that {@link GvisorDriver.settle} reads. */
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

/** How long a checkpoint that found an open host socket waits before its one retry, in ms. */
const HOST_SOCKET_RETRY_DELAY_MS = 250;
/** How long after a start or resume a missing agent is still expected to connect, in ms. */
const AGENT_START_GRACE_MS = 3_000;
/**
 * How long an exec waits for the agent of a container that just started, was restored or checkpointed, counted
 * from that moment, in ms. Generous: on a loaded host (load 15 on 2 cores) the agent took over 3 s to connect, and
 * the alternative, `runsc exec`, can make the sandbox's next checkpoint impossible (host-fd-scan.ts).
 */
const AGENT_EXEC_WAIT_MS = 10_000;
/** How long an exec waits for an agent to find a listener that was just opened (server restart), in ms. */
const AGENT_RECONNECT_WAIT_MS = 400;

/** Structured logger the driver writes to (pino-compatible subset). */
export interface DriverLogger {
  info(object: object, message?: string): void;
  warn(object: object, message?: string): void;
  error(object: object, message?: string): void;
  child(bindings: object): DriverLogger;
}

/** Options of {@link GvisorDriver}. */
export interface GvisorDriverOptions {
  /** Directory for per-sandbox files: `<dataDir>/sandboxes/<id>/`. */
  dataDir: string;
  /** runsc binary. @default 'runsc' */
  runscPath?: string;
  /** gVisor platform. @default 'systrap' (syscalls 10–35× cheaper than ptrace here; see the report) */
  platform?: GvisorPlatform;
  /** runsc state dir (`--root`). @default `${dataDir}/runsc` */
  stateDir?: string;
  /** Most processes a sandbox may have (RLIMIT_NPROC inside; the host pids cgroup gets headroom). @default 1024 */
  maxProcesses?: number;
  /** Root of the cgroup v1 hierarchies. @default '/sys/fs/cgroup' */
  cgroupRoot?: string;
  /**
   * Where each instance records which data dir its cgroup parent `burrow/<hash>` belongs to (one file per hash,
   * holding the data dir's path), so that {@link GvisorDriver.reapStaleCgroupParents} can tell a parent whose data
   * dir is gone. Under /run: gone at reboot, like the cgroups. @default '/run/burrow/cgroup-parents'
   */
  cgroupOwnersDir?: string;
  logger?: DriverLogger;
  /**
   * Run commands through the in-sandbox exec agent (docs/adr/0003); `false` makes every exec a `runsc exec`, as
   * for sandboxes created without the agent (the off switch; the server's is `BURROW_EXEC_AGENT=0`). Until the
   * agent of a just created, resumed or forked sandbox connected, exec uses `runsc exec` without waiting.
   * @default true
   */
  execAgent?: boolean;
  /** Where the compiled agent is cached (content-addressed, shareable between data dirs). @default `${dataDir}/agent-cache` */
  agentCacheDir?: string;
  /**
   * Encrypt memory images at rest (pause images, memory snapshots) with `key` (see `loadImageKey`). runsc
   * writes and reads them in plaintext in a private directory under `plainRoot`, which must be on a tmpfs, for the
   * time of one checkpoint or restore (the memory this takes is the image's size). The server's switches are
   * `BURROW_IMAGE_ENCRYPTION` and `BURROW_IMAGE_KEY_FILE`.
   * @default off; `plainRoot` defaults to `/dev/shm/burrow-images-<12 hex of sha256(dataDir)>`
   */
  imageEncryption?: { key: ImageKey; plainRoot?: string };
}

/** Host paths of one sandbox. */
export interface SandboxPaths {
  dir: string;
  /** Pause image and its manifest: `<dir>/checkpoint/`. */
  checkpointDir: string;
  image: string;
  diskDir: string;
  upperDir: string;
  workDir: string;
  rootfs: string;
  logsDir: string;
  /** The exec agent's binary and host socket, bind-mounted read-only at `/.burrow-agent`. */
  agentDir: string;
}

/**
 * RuntimeDriver on gVisor (runsc). Each sandbox gets a sparse ext4 image (its disk limit) holding the
 * upper and work dirs of an overlayfs over the shared read-only template, an OCI bundle, and cgroups
 * `/burrow/<id>` with memory, CPU and pids limits.
 * @example
 * const driver = new GvisorDriver({ dataDir: '/var/lib/burrow' });
 * await driver.create({ sandboxId, template, resources, hostname: 'sandbox' });
 */
export class GvisorDriver implements RuntimeDriver {
  readonly name = 'gvisor';
  readonly capabilities: ReadonlySet<Capability> = new Set<Capability>(['checkpoint', 'fork']);
  private readonly runsc: RunscCli;
  private readonly checkpointer: GvisorCheckpointer;
  private readonly dataDir: string;
  private readonly cgroupRoot: string;
  private readonly maxProcesses: number;
  /**
   * This instance's cgroup parent, `burrow/<12 hex of sha256(dataDir)>`: two servers (or a server and the tests)
   * on one host never see, count or reap each other's sandboxes.
   */
  private readonly cgroupParent: string;
  /** See {@link GvisorDriverOptions.cgroupOwnersDir}. */
  private readonly cgroupOwnersDir: string;
  /** The owner record of this instance's cgroup parent, written once before the first sandbox starts. */
  private ownerRecorded: Promise<void> | null = null;
  private readonly platform: GvisorPlatform;
  private readonly logger: DriverLogger | undefined;
  /** Last seen memory-cgroup `oom_kill` counter per sandbox. */
  private readonly oomKillsSeen = new Map<string, number>();
  /** Sandboxes whose exit was already reported. */
  private readonly exitReported = new Set<string>();
  /** Host ends of the in-sandbox exec agents. */
  private readonly agents = new AgentHub();
  /** Labels exec exits the sandbox cannot label (memory-limit kills, checkpoints of `runsc exec` commands). */
  private readonly exitReasons = new ExecExitReasons((sandboxId) => readOomKillCount(this.memoryCgroup(sandboxId)));
  private agentBuildPromise: Promise<AgentBuild> | null = null;
  /** Sandboxes whose agent did not connect when waited for (exec goes through runsc exec without waiting). */
  private readonly agentAbsent = new Set<string>();
  private readonly execAgent: boolean;
  private readonly agentCacheDir: string;

  constructor(options: GvisorDriverOptions) {
    this.dataDir = options.dataDir;
    this.platform = options.platform ?? 'systrap';
    this.runsc = new RunscCli(
      options.runscPath ?? 'runsc',
      options.stateDir ?? join(options.dataDir, 'runsc'),
      this.platform,
      options.execAgent ?? true,
    );
    this.cgroupRoot = options.cgroupRoot ?? '/sys/fs/cgroup';
    this.maxProcesses = options.maxProcesses ?? 1024;
    this.cgroupParent = `${CGROUP_PARENT}/${cgroupParentHash(options.dataDir)}`;
    this.cgroupOwnersDir = options.cgroupOwnersDir ?? DEFAULT_CGROUP_OWNERS_DIR;
    this.logger = options.logger;
    this.execAgent = options.execAgent ?? true;
    this.agentCacheDir = options.agentCacheDir ?? join(options.dataDir, 'agent-cache');
    this.checkpointer = new GvisorCheckpointer({
      runsc: this.runsc,
      imageEncryption:
        options.imageEncryption === undefined
          ? undefined
          : new ImageEncryption({
              key: options.imageEncryption.key,
              plainRoot:
                options.imageEncryption.plainRoot ?? `/dev/shm/burrow-images-${cgroupParentHash(options.dataDir)}`,
              memoryCgroupOf: (id) => join(this.cgroupRoot, 'memory', this.cgroupParent, id),
              warn: (object, message) => this.logger?.warn(object, message),
            }),
      paths: (id) => this.paths(id),
      prepareBundle: (o, made) => this.prepareBundle(o, made),
      runscStep: (id, args, step, signal) => this.runscStep(id, args, step, signal),
      started: (id, pid, cpuCount) => this.afterStart(id, pid, cpuCount),
      removeCgroups: async (id) => removeCgroupDirs(await this.cgroupDirsOf(id)),
      goferGone: (id, pid) => goferGone(this.pidsCgroup(id), pid),
      create: (o) => this.create(o),
      delete: (id) => this.delete(id),
      warn: (object, message) => this.logger?.warn(object, message),
      info: (object, message) => this.logger?.info(object, message),
    });
  }

  pause(sandboxId: string, options: { signal?: AbortSignal } = {}): Promise<CheckpointInfo> {
    return this.withAgentQuiesced(sandboxId, () => this.checkpointer.pause(sandboxId, options.signal));
  }

  resume(options: CreateOptions): Promise<void> {
    return this.checkpointer.resume(options);
  }

  /**
   * Wait until the checksums of `sandboxId`'s pause image, taken in the background after its pause answered, are
   * written (or found impossible because a file changed). For tests that alter a pause image on purpose.
   */
  checksummed(sandboxId: string): Promise<void> {
    return this.checkpointer.checksummed(sandboxId);
  }

  async stop(sandboxId: string): Promise<void> {
    await this.agents.close(sandboxId);
    return this.checkpointer.stop(sandboxId);
  }

  fork(sandboxId: string, options: ForkOptions): Promise<void> {
    return this.withAgentQuiesced(sandboxId, () => this.checkpointer.fork(sandboxId, options));
  }

  snapshot(sandboxId: string, options: SnapshotOptions): Promise<CheckpointInfo> {
    if (!options.memory) return this.checkpointer.snapshot(sandboxId, options);
    return this.withAgentQuiesced(sandboxId, () => this.checkpointer.snapshot(sandboxId, options));
  }

  /**
   * Run a checkpointing step with the exec agent quiesced (gVisor cannot save an open host socket: the agent drops
   * them and ends its running commands, as a restore would), then listen again if the sandbox still runs.
   */
  private async withAgentQuiesced<T>(sandboxId: string, step: () => Promise<T>): Promise<T> {
    const startedMs = performance.now();
    this.exitReasons.checkpointStarting(sandboxId);
    await this.agents.quiesce(sandboxId);
    const quiesceMs = Math.round(performance.now() - startedMs);
    try {
      // An image holding a host descriptor saves without complaint and then never restores: refuse it up front.
      await assertNoHostFds(this.runsc, sandboxId, this.paths(sandboxId).dir);
      try {
        return await step();
      } catch (error) {
        // The sandbox runs again after a refused checkpoint: say which process holds what.
        if (!(error instanceof HostSocketOpenError)) throw await explainBlockers(this.runsc, sandboxId, error);
        // A connection the agent opened as the listener closed can still be on its way down: once more, later.
        this.logger?.warn({ sandboxId }, 'checkpoint found an open host socket; retrying once');
        await new Promise((resolve) => setTimeout(resolve, HOST_SOCKET_RETRY_DELAY_MS));
        return await step();
      }
    } finally {
      const stepEndMs = performance.now();
      const state = await this.runsc.state(sandboxId).catch(() => null);
      if (state?.status === 'running') await this.listenForAgent(sandboxId).catch(() => undefined);
      this.logger?.info(
        { sandboxId, quiesceMs, relistenMs: Math.round(performance.now() - stepEndMs) },
        'agent quiesce steps',
      );
    }
  }

  /** Listen for the sandbox's agent (idempotent); false when there is no agent build or the path is too long. */
  private async listenForAgent(sandboxId: string): Promise<boolean> {
    if ((await this.agentBuild()).kind !== 'built') return false;
    return this.agents.listen(sandboxId, this.paths(sandboxId).agentDir);
  }

  /** The agent build, made once per driver (compiled on first use, cached by source hash under the data dir). */
  private agentBuild(): Promise<AgentBuild> {
    if (!this.execAgent) return Promise.resolve({ kind: 'unavailable', reason: 'disabled by the driver options' });
    if (this.agentBuildPromise === null) {
      this.agentBuildPromise = buildAgent(this.agentCacheDir).then((build) => {
        if (build.kind === 'unavailable') {
          this.logger?.warn({ reason: build.reason }, 'exec agent unavailable; exec uses runsc exec');
        }
        return build;
      });
    }
    return this.agentBuildPromise;
  }

  /**
   * The agent's control connection for an exec, or null: then exec falls back to `runsc exec`. An agent still
   * connecting after a start, resume, fork or checkpoint is waited for until {@link AGENT_EXEC_WAIT_MS} after
   * its container started (or its listener opened again after a checkpoint); after a server restart the listener is opened here and the agent, which retries every
   * 100 ms, is waited for briefly. A sandbox whose agent does not come (made before it existed) is logged once.
   */
  private async agentControl(sandboxId: string): Promise<Socket | null> {
    const connected = await this.agents.control(sandboxId, 0);
    if (connected !== null) return connected;
    const listeningForMs = this.agents.listeningForMs(sandboxId);
    let control: Socket | null = null;
    if (listeningForMs === null) {
      if (!(await this.listenForAgent(sandboxId).catch(() => false))) return null;
      control = await this.agents.control(sandboxId, AGENT_RECONNECT_WAIT_MS);
    } else if (listeningForMs < AGENT_EXEC_WAIT_MS) {
      // Just created, resumed or forked: the agent connects within ~100-300 ms. Waiting for it costs about what a
      // `runsc exec` costs, and a `runsc exec` hands the command host descriptors that block the next checkpoint.
      control = await this.agents.control(sandboxId, AGENT_EXEC_WAIT_MS - listeningForMs);
    }
    if (control === null && !this.agentAbsent.has(sandboxId)) {
      this.agentAbsent.add(sandboxId);
      this.logger?.warn({ sandboxId }, 'no exec agent connected; exec uses runsc exec for this sandbox');
    }
    return control;
  }

  /**
   * Wait until the sandbox's exec agent is connected (for example before handing a fresh sandbox out, or in
   * tests). Resolves false after `timeoutMs` or when the sandbox has no agent listener.
   */
  async execAgentReady(sandboxId: string, timeoutMs = AGENT_START_GRACE_MS): Promise<boolean> {
    if (this.agents.listeningForMs(sandboxId) === null) await this.listenForAgent(sandboxId).catch(() => false);
    return (await this.agents.control(sandboxId, timeoutMs)) !== null;
  }

  createFromSnapshot(options: CreateFromSnapshotOptions): Promise<void> {
    return this.checkpointer.createFromSnapshot(options);
  }

  async settle(sandboxId: string): Promise<void> {
    // A read-only inspection mount a crash left would hold the image while a resume mounts it read-write.
    await releaseInspectMount(this.paths(sandboxId).dir);
    await this.checkpointer.settle(sandboxId);
    // A crash between runsc's start or restore and afterStart left the container on its boot quota (every CPU).
    if ((await this.runsc.state(sandboxId))?.status === 'running') await this.enforceCpuLimit(sandboxId);
  }

  /** Set the CPU limit recorded in the running container's bundle ({@link CPU_COUNT_ANNOTATION}), if it has one. */
  private async enforceCpuLimit(sandboxId: string): Promise<void> {
    const spec = await readFile(join(this.paths(sandboxId).dir, 'config.json'), 'utf8').catch(() => null);
    const recorded = spec === null ? undefined : (JSON.parse(spec) as OciAnnotated).annotations?.[CPU_COUNT_ANNOTATION];
    const cpuCount = Number(recorded);
    if (recorded !== undefined && Number.isFinite(cpuCount) && cpuCount > 0) {
      await setCpuQuota(this.cgroupRoot, this.cgroupParent, sandboxId, cpuCount);
    }
  }

  inspectDisk(sandboxId: string, options: InspectDiskOptions): Promise<DiskInspection> {
    const paths = this.paths(sandboxId);
    return stat(paths.image).then(
      (st) => inspectSandboxDisk(paths, { ...options, limitBytes: st.size }),
      () => {
        throw new RuntimeError(`sandbox ${sandboxId} has no disk on this host`);
      },
    );
  }

  async diskUsageBytes(sandboxId: string): Promise<number> {
    return allocatedBytes(this.paths(sandboxId).dir);
  }

  async spawn(sandboxId: string, options: SpawnOptions): Promise<void> {
    const result = await this.runsc.run(['exec', sandboxId, ...spawnRequestArgv(options)], { timeoutMs: 30_000 });
    if (result.exitCode !== 0) {
      throw new RuntimeError(
        `spawning in ${sandboxId} failed (exit ${result.exitCode ?? result.signal})`,
        result.stderr,
      );
    }
  }

  rootDir(sandboxId: string): string {
    return this.paths(sandboxId).rootfs;
  }

  async create(options: CreateOptions): Promise<void> {
    const { sandboxId, signal } = options;
    const paths = this.paths(sandboxId);
    const existing = await this.runsc.state(sandboxId);
    if (existing?.status === 'running') {
      // Started already (a create again after a crash): finish what the crash may have cut short after the start.
      await this.afterStart(sandboxId, existing.pid, options.resources.cpuCount);
      return;
    }
    const checkAbort = (): void => {
      if (signal?.aborted) throw abortError(signal);
    };
    const made: Array<() => Promise<void>> = [];
    await this.recordCgroupOwner();
    try {
      checkAbort();
      if (existing) await this.runsc.run(['delete', '-force', sandboxId]);
      await this.prepareBundle(options, made);
      await ensureGuestIdentity({ rootfsDir: paths.rootfs, upperDir: paths.upperDir, hostname: options.hostname });
      checkAbort();
      made.push(async () => {
        await this.runsc.run(['delete', '-force', sandboxId]);
        await removeCgroupDirs(await this.cgroupDirsOf(sandboxId));
      });
      await this.runscStep(sandboxId, ['create', '--bundle', paths.dir, sandboxId], 'create', signal);
      await this.runscStep(sandboxId, ['start', sandboxId], 'start', signal);
      const state = await this.runsc.state(sandboxId);
      if (state?.status !== 'running') {
        throw new RuntimeError(
          `sandbox ${sandboxId} is ${state?.status ?? 'missing'} right after start`,
          await this.logTail(sandboxId),
        );
      }
      await this.afterStart(sandboxId, state.pid, options.resources.cpuCount);
      this.logger?.info({ sandboxId }, 'sandbox created');
    } catch (error) {
      for (const undo of made.reverse()) await undo().catch(() => undefined);
      if (error instanceof RuntimeError || signal?.aborted) throw error;
      throw new RuntimeError(`creating sandbox ${sandboxId} failed: ${String(error)}`, undefined, { cause: error });
    }
  }

  async exec(sandboxId: string, options: ExecOptions): Promise<SandboxProcess> {
    const paths = this.paths(sandboxId);
    if (options.signal?.aborted) throw abortError(options.signal);
    const oomKillsBefore = this.exitReasons.oomKillsBefore(sandboxId);
    const control = await this.agentControl(sandboxId);
    if (control !== null) {
      try {
        const process = await this.agents.exec(sandboxId, control, options);
        return this.exitReasons.track(sandboxId, process, oomKillsBefore, 'agent');
      } catch (error) {
        if (!(error instanceof AgentStartError)) throw error;
        // Nothing ran: start it with runsc exec instead.
        this.logger?.warn({ sandboxId, reason: error.message }, 'exec agent refused a command; using runsc exec');
      }
    }
    const tag = randomBytes(6).toString('hex');
    await markRunscExec(paths.dir);
    const process = await startSandboxProcess({
      runsc: this.runsc,
      sandboxId,
      argv: options.argv,
      env: options.env,
      cwd: options.cwd,
      user: options.user,
      pidFile: join(paths.logsDir, `exec-${tag}.pid`),
      logFile: join(paths.logsDir, `exec-${tag}.log`),
      signal: options.signal,
    });
    // New guest processes may bring new stub processes; marking them is off the exec's critical path.
    void this.runsc
      .state(sandboxId)
      .then((state) => (state && state.pid > 0 ? preferStubsForOomKill(state.pid) : undefined))
      .catch(() => undefined);
    return this.exitReasons.track(sandboxId, process, oomKillsBefore, 'runsc');
  }

  async observe(sandboxId: string): Promise<ObservedSandbox> {
    const paths = this.paths(sandboxId);
    const events: RuntimeEvent[] = [];
    const oomKills = await readOomKillCount(this.memoryCgroup(sandboxId));
    if (oomKills !== null) {
      const seen = this.oomKillsSeen.get(sandboxId) ?? 0;
      if (oomKills > seen) {
        events.push({
          type: 'OOMKilled',
          reason: 'MemoryLimit',
          message: `${oomKills - seen} process(es) killed at the sandbox's memory limit`,
        });
      }
      this.oomKillsSeen.set(sandboxId, oomKills);
    }
    // A complete pause image wins: runsc reports the killed sentry as running until it is reaped.
    if (await this.checkpointer.isPaused(sandboxId)) return { status: 'paused', events };
    const state = await this.runsc.state(sandboxId);
    // A killed gofer leaves a sentry that runsc reports running but that can open no file: the runtime ended.
    const noGofer =
      state?.status === 'running' && state.pid > 0 && (await goferGone(this.pidsCgroup(sandboxId), state.pid));
    if (!noGofer && (state?.status === 'running' || state?.status === 'paused' || state?.status === 'created')) {
      if (state.pid > 0) await preferStubsForOomKill(state.pid);
      return { status: 'running', events };
    }
    const anything = state !== null || (await fileExists(paths.dir));
    if (!anything) return { status: 'missing', events };
    if (!this.exitReported.has(sandboxId)) {
      this.exitReported.add(sandboxId);
      // The message says what happened and what to do; runsc's own log lines stay in the server log.
      const oom = oomKills !== null && oomKills > 0;
      const detail = await this.logTail(sandboxId, 5);
      if (detail) this.logger?.warn({ sandboxId, runscLog: detail }, 'sandbox exited');
      events.push({
        type: 'RuntimeExited',
        reason: noGofer ? 'GoferExited' : oom ? 'OOMKilled' : 'SandboxExited',
        message: noGofer
          ? "the sandbox's file server (its gVisor gofer) exited, so it could open no file; start it again (its " +
            'disk is kept) or delete it'
          : oom
            ? 'the sandbox stopped: it ran out of memory (its memory limit was reached, often by a runaway or forking ' +
              'workload); start it again (its disk is kept) or create one with a larger memoryMiB'
            : 'the sandbox stopped unexpectedly (its gVisor kernel exited); start it again (its disk is kept) or delete it',
      });
    }
    return { status: 'stopped', events };
  }

  /**
   * Close the agent connections (an agent still connected to this driver's socket would hold a host socket open in
   * its sandbox, which a later checkpoint by the next driver cannot save) and remove this instance's cgroup parent `burrow/<hash>` where it is empty (no
   * sandbox cgroup left under it: sandboxes still running keep it), with its owner record once it is gone.
   */
  async close(): Promise<void> {
    await this.agents.closeAll();
    if (await removeEmptyCgroupParent(this.cgroupRoot, this.cgroupParent)) {
      await rm(this.ownerFile(this.cgroupParent.slice(CGROUP_PARENT.length + 1)), { force: true }).catch(
        () => undefined,
      );
      this.ownerRecorded = null;
    }
  }

  /** {@link reapStaleCgroupParents}, as the reconciler's hook: `cgroup burrow/<hash>` per parent removed. */
  async reapHostLeftovers(): Promise<string[]> {
    return (await this.reapStaleCgroupParents()).map((hash) => `cgroup ${CGROUP_PARENT}/${hash}`);
  }

  /** The owner record of cgroup parent `burrow/<hash>`. */
  private ownerFile(hash: string): string {
    return join(this.cgroupOwnersDir, hash);
  }

  /** Record (once) that this instance's cgroup parent belongs to its data dir. Failures only lose the record. */
  private recordCgroupOwner(): Promise<void> {
    this.ownerRecorded ??= (async () => {
      await mkdir(this.cgroupOwnersDir, { recursive: true });
      await writeFile(this.ownerFile(this.cgroupParent.slice(CGROUP_PARENT.length + 1)), resolve(this.dataDir));
    })().catch((error: unknown) => this.logger?.warn({ err: error }, 'recording the cgroup parent owner failed'));
    return this.ownerRecorded;
  }

  /**
   * Remove the empty cgroup parents `burrow/<hash>` of other instances whose data dir no longer exists (their
   * owner record names it), and empty ones without a record (made before records existed) untouched for
   * `unrecordedAgeMs`. Never this instance's own, never one with a sandbox cgroup under it.
   * @param options.unrecordedAgeMs @default 3_600_000 (1 hour)
   * @returns the hashes removed
   */
  async reapStaleCgroupParents(options: { unrecordedAgeMs?: number } = {}): Promise<string[]> {
    const own = this.cgroupParent.slice(CGROUP_PARENT.length + 1);
    const removed: string[] = [];
    for (const hash of await cgroupChildren(this.cgroupRoot, CGROUP_PARENT)) {
      if (hash === own || !/^[0-9a-f]{12}$/.test(hash)) continue;
      const owner = await readFile(this.ownerFile(hash), 'utf8').catch(() => null);
      if (owner !== null) {
        if (existsSync(owner)) continue;
      } else {
        const dirs = await cgroupDirs(this.cgroupRoot, '', join(CGROUP_PARENT, hash));
        const newestMs = Math.max(
          0,
          ...(await Promise.all(
            dirs.map((d) =>
              stat(d).then(
                (st) => st.mtimeMs,
                () => 0,
              ),
            ),
          )),
        );
        if (Date.now() - newestMs < (options.unrecordedAgeMs ?? 3_600_000)) continue;
      }
      if (await removeEmptyCgroupParent(this.cgroupRoot, join(CGROUP_PARENT, hash))) {
        await rm(this.ownerFile(hash), { force: true }).catch(() => undefined);
        removed.push(hash);
      }
    }
    return removed;
  }

  async delete(sandboxId: string, options: { signal?: AbortSignal } = {}): Promise<void> {
    if (options.signal?.aborted) throw abortError(options.signal);
    await this.agents.close(sandboxId);
    this.agentAbsent.delete(sandboxId);
    const paths = this.paths(sandboxId);
    await this.checkpointer.released(sandboxId);
    // SIGKILL every host process of the sandbox first (sentry, gofer, stubs: all in its pids cgroup): runsc's own
    // kill and delete can take a minute against a sandbox under a fork bomb, and a dead sandbox deletes at once.
    await killCgroupProcesses(join(this.cgroupRoot, 'pids', this.cgroupParent, sandboxId));
    if ((await this.runsc.state(sandboxId)) !== null && !(await this.runsc.forgetExited(sandboxId))) {
      await this.runsc.run(['kill', sandboxId, 'KILL']);
      await this.runsc.run(['delete', '-force', sandboxId]);
    }
    await unmountAll(paths.dir);
    await detachLoopDevices(paths.dir);
    await removeCgroupDirs(await this.cgroupDirsOf(sandboxId));
    await rm(paths.dir, { recursive: true, force: true });
    this.oomKillsSeen.delete(sandboxId);
    this.exitReported.delete(sandboxId);
    const remaining = await this.remainingResources(sandboxId);
    if (remaining.length > 0) {
      throw new RuntimeError(`sandbox ${sandboxId} was not fully removed`, remaining.join('\n'));
    }
    this.logger?.info({ sandboxId }, 'sandbox deleted');
  }

  async listHostResources(): Promise<HostResources> {
    const kinds = new Map<string, Set<HostResourceKind>>();
    const add = (id: string | undefined, kind: HostResourceKind): void => {
      if (!id || !SandboxIdSchema.safeParse(id).success) return;
      const set = kinds.get(id) ?? new Set<HostResourceKind>();
      set.add(kind);
      kinds.set(id, set);
    };
    for (const id of await this.runsc.list()) add(id, 'container');
    const sandboxesDir = join(this.dataDir, 'sandboxes');
    for (const name of await readdir(sandboxesDir).catch(() => [] as string[])) add(name, 'directory');
    for (const point of await mountsUnder(sandboxesDir)) {
      add(point.slice(sandboxesDir.length + 1).split('/')[0], 'mount');
    }
    for (const device of await loopDevicesUnder(sandboxesDir)) {
      const backing = await readFile(`/sys/block/${device.slice(5)}/loop/backing_file`, 'utf8').catch(() => '');
      add(backing.slice(sandboxesDir.length + 1).split('/')[0], 'loop_device');
    }
    for (const name of await cgroupChildren(this.cgroupRoot, this.cgroupParent)) add(name, 'cgroup');
    const sandboxIds = [...kinds.keys()].sort();
    return { sandboxIds, kinds: Object.fromEntries(sandboxIds.map((id) => [id, [...(kinds.get(id) ?? [])].sort()])) };
  }

  /** What of the sandbox is still on the host, one line per resource. */
  private async remainingResources(sandboxId: string): Promise<string[]> {
    const paths = this.paths(sandboxId);
    const remaining: string[] = [];
    if ((await this.runsc.list()).includes(sandboxId)) remaining.push(`runsc container ${sandboxId}`);
    for (const point of await mountsUnder(paths.dir)) remaining.push(`mount ${point}`);
    for (const device of await loopDevicesUnder(paths.dir)) remaining.push(`loop device ${device}`);
    for (const dir of await this.cgroupDirsOf(sandboxId)) remaining.push(`cgroup ${dir}`);
    if (await fileExists(paths.dir)) remaining.push(`directory ${paths.dir}`);
    return remaining;
  }

  async runscStep(sandboxId: string, args: string[], step: string, signal: AbortSignal | undefined): Promise<void> {
    const { logsDir } = this.paths(sandboxId);
    const outputFile = join(logsDir, 'init.log');
    const debugLog = join(logsDir, 'runsc-%COMMAND%.log');
    // runsc create hands its stdio to the sandbox: a file, never a pipe this process would wait on.
    const result = await this.runsc.run(args, { debugLog, signal, outputFile });
    if (result.exitCode !== 0) {
      const output = await readFile(outputFile, 'utf8').catch(() => '');
      throw new RuntimeError(
        `runsc ${step} failed for ${sandboxId} (exit ${result.exitCode ?? result.signal})`,
        `${tail(output, 10)}\n${await this.logTail(sandboxId)}`.trim(),
      );
    }
  }

  /** The last lines of runsc's logs for a sandbox that look like errors, for error details and events. */
  private async logTail(sandboxId: string, maxLines = 15): Promise<string> {
    const logsDir = this.paths(sandboxId).logsDir;
    const lines: string[] = [];
    for (const name of await readdir(logsDir).catch(() => [] as string[])) {
      if (!name.startsWith('runsc-')) continue;
      const text = await readFile(join(logsDir, name), 'utf8').catch(() => '');
      lines.push(...text.split('\n').filter((line) => /^[WEF]\d{4}|FATAL|panic/.test(line)));
    }
    return tail(lines.join('\n'), maxLines);
  }

  /** Host pids limit: systrap needs about 2 host tasks per guest process, ptrace about 9; doubled for headroom under a fork bomb. */
  private pidsLimit(processLimit: number): number {
    return (this.platform === 'systrap' ? 4 : 10) * processLimit + 128;
  }

  /**
   * RLIMIT_NPROC inside: `maxProcesses`, but at most one process per 2 MiB of the memory limit (at least 64), so a
   * fork bomb hits the graceful process cap before it exhausts memory and the host OOM killer ends the sandbox.
   */
  private processLimit(memoryMiB: number): number {
    return Math.min(this.maxProcesses, Math.max(64, Math.floor(memoryMiB / 2)));
  }

  /**
   * Once a container runs (started or restored): its CPU limit (the bundle lets it boot on every host CPU, see
   * {@link GvisorDriver.prepareBundle}), the OOM preference of its stubs, its counters.
   * @throws RuntimeError when the CPU limit cannot be set (the caller undoes the start)
   */
  private async afterStart(sandboxId: string, sentryPid: number, cpuCount: number): Promise<void> {
    this.agents.containerStarted(sandboxId);
    await setCpuQuota(this.cgroupRoot, this.cgroupParent, sandboxId, cpuCount);
    await openCpuset(this.cgroupRoot, this.cgroupParent, sandboxId);
    // A new container: no process in it holds a `runsc exec`'s descriptors.
    await clearRunscExecMark(this.paths(sandboxId).dir);
    await preferStubsForOomKill(sentryPid);
    this.oomKillsSeen.set(sandboxId, (await readOomKillCount(this.memoryCgroup(sandboxId))) ?? 0);
    this.exitReported.delete(sandboxId);
  }

  private memoryCgroup(sandboxId: string): string {
    return join(this.cgroupRoot, 'memory', this.cgroupParent, sandboxId);
  }

  /** The sandbox's pids cgroup directory: its sentry, gofer and stubs. */
  private pidsCgroup(sandboxId: string): string {
    return join(this.cgroupRoot, 'pids', this.cgroupParent, sandboxId);
  }

  private cgroupDirsOf(sandboxId: string): Promise<string[]> {
    return cgroupDirs(this.cgroupRoot, this.cgroupParent, sandboxId);
  }

  /**
   * Mount the sandbox's disk (making it if absent) and overlay, and write its OCI bundle; each step done is pushed
   * onto `made` as its undo. Shared by create, resume, fork and snapshot restores.
   */
  async prepareBundle(options: CreateOptions, made: Array<() => Promise<void>>): Promise<void> {
    const { sandboxId } = options;
    const paths = this.paths(sandboxId);
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
    await installAgent(await this.agentBuild(), paths.agentDir);
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
      tmpfs: [
        { destination: '/tmp', sizeMiB: Math.max(1, Math.floor(options.resources.memoryMiB * TMP_MEMORY_SHARE)) },
      ],
      mounts: [
        // The exec agent and its host socket (docs/adr/0003); read-only: the sandbox can connect, not tamper.
        { source: paths.agentDir, destination: AGENT_GUEST_DIR, readonly: true },
      ],
      limits: {
        cgroupsPath: `/${this.cgroupParent}/${sandboxId}`,
        memoryMiB: options.resources.memoryMiB,
        // Boot and restore on every host CPU; afterStart sets the sandbox's own limit once it runs. Under its limit
        // (1 CPU by default) runsc's restore work ran in the sandbox's cgroup: raw `runsc restore` of the same
        // image took 568 ms p50 with a 1-CPU quota against 392 without and 420 with 2 CPUs (session 9, 8
        // alternating cycles each, docs/adr/0002).
        cpuCount: BOOT_CPU_COUNT,
        // The sentry counts its CPUs once, from the cpuset it starts in (runsc's --cpu-num-from-quota never goes
        // below 2, and reads the boot quota): start on as many CPUs as the sandbox has, so that `nproc` and
        // sysconf inside say cpuCount; afterStart opens the cpuset to every host CPU again (the quota limits).
        cpus: bootCpus(options.resources.cpuCount),
        processLimit: this.processLimit(options.resources.memoryMiB),
        pidsLimit: this.pidsLimit(this.processLimit(options.resources.memoryMiB)),
      },
      // The limit afterStart sets, for settle to set again after a crash between runsc's start and afterStart.
      annotations: { [CPU_COUNT_ANNOTATION]: String(options.resources.cpuCount) },
    });
    await writeFile(join(paths.dir, 'config.json'), `${JSON.stringify(spec, null, 2)}\n`);
    await prepareCpusetParent(this.cgroupRoot, this.cgroupParent);
    // Listen before the container starts, so the agent's first connect succeeds.
    this.agentAbsent.delete(sandboxId);
    if (await this.listenForAgent(sandboxId).catch(() => false)) made.push(() => this.agents.close(sandboxId));
  }

  /** Host paths of the sandbox's files. @throws RuntimeError for a malformed id */
  paths(sandboxId: string): SandboxPaths {
    if (!SandboxIdSchema.safeParse(sandboxId).success) throw new RuntimeError(`not a sandbox id: ${sandboxId}`);
    const dir = join(this.dataDir, 'sandboxes', sandboxId);
    const diskDir = join(dir, 'disk');
    return {
      dir,
      checkpointDir: join(dir, 'checkpoint'),
      image: join(dir, 'disk.img'),
      diskDir,
      upperDir: join(diskDir, 'upper'),
      workDir: join(diskDir, 'work'),
      rootfs: join(dir, 'rootfs'),
      logsDir: join(dir, 'logs'),
      agentDir: join(dir, 'agent'),
    };
  }
}

/** Allocated bytes of everything beneath `dir` (0 when absent); mount points are not descended into. */
async function allocatedBytes(dir: string): Promise<number> {
  const root = await lstat(dir).catch(() => null);
  if (root === null) return 0;
  let total = root.blocks * 512;
  if (!root.isDirectory()) return total;
  const mounted = new Set(await mountsUnder(dir));
  const queue = [dir];
  while (queue.length > 0) {
    const next = queue.pop() as string;
    for (const entry of await readdir(next, { withFileTypes: true }).catch(() => [])) {
      const path = join(next, entry.name);
      if (mounted.has(path)) continue;
      const st = await lstat(path).catch(() => null);
      if (st === null) continue;
      total += st.blocks * 512;
      if (st.isDirectory()) queue.push(path);
    }
  }
  return total;
}

async function fileExists(path: string): Promise<boolean> {
  const handle = await open(path, 'r').catch(() => null);
  if (!handle)
    return stat(path).then(
      () => true,
      () => false,
    );
  await handle.close();
  return true;
}
