import { randomBytes } from 'node:crypto';
import { readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { NetworkPolicy, NetworkUsage } from '@burrow/contract';
import { ErrorCode } from '@burrow/contract';
import {
  type Capability,
  type CheckpointInfo,
  type CreateFromSnapshotOptions,
  type CreateOptions,
  crashPoint,
  type DiskInspection,
  type ExecOptions,
  type ForkOptions,
  type HostResources,
  type InspectDiskOptions,
  type ObservedSandbox,
  type RuntimeDriver,
  RuntimeError,
  type RuntimeEvent,
  type SandboxProcess,
  type SnapshotOptions,
  type SpawnOptions,
  type SupervisedStart,
  type SupervisedStartOptions,
  UnsupportedError,
} from '@burrow/runtime';
import { AgentExec } from './agent-exec.js';
import { inspectSandboxDisk, releaseInspectMount } from './disk-inspect.js';
import { ExecExitReasons } from './exec-exit-reason.js';
import { ensureGuestIdentity } from './guest-identity-files.js';
import { GvisorCheckpointer } from './gvisor-checkpoint.js';
import { clearRunscExecMark, markRunscExec } from './host-fd-scan.js';
import {
  detachLoopDevices,
  fileExists,
  goferGone,
  killCgroupProcesses,
  openCpuset,
  preferStubsForOomKill,
  readOomKillCount,
  removeCgroupDirs,
  setCpuQuota,
  unmountAll,
} from './host-plumbing.js';
import { allocatedBytes, listHostResources, remainingResources } from './host-resources.js';
import { ImageEncryption, type ImageKey } from './image-encryption.js';
import { NO_NETWORK, SandboxNetworks, type SandboxNetworksOptions } from './network/sandbox-network.js';
import { abortError, tail } from './run-command.js';
import { type GvisorPlatform, RunscCli } from './runsc-cli.js';
import { enforceRecordedCpuLimit, prepareBundle } from './sandbox-bundle.js';
import { CGROUP_PARENT, cgroupParentHash, readCgroupUsage, SandboxCgroups } from './sandbox-cgroups.js';
import { type SandboxPaths, sandboxPaths } from './sandbox-paths.js';
import { startSandboxProcess } from './sandbox-process.js';
import { SPAWN_FIFO, SPAWN_FIFO_GONE_EXIT, spawnRequestArgv } from './spawner.js';

export type { SandboxPaths } from './sandbox-paths.js';

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
  /**
   * Give every sandbox a network of its own (gVisor's netstack in a namespace of its own, behind a router
   * namespace that enforces its policy; see {@link SandboxNetworks}): `CreateOptions.network` is then its policy
   * (absent: mode `none`, nothing passes). Without this option sandboxes run with `--network=none`.
   * @default off
   */
  network?: Omit<SandboxNetworksOptions, 'instanceHash' | 'sandboxDir'>;
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
  readonly capabilities: ReadonlySet<Capability>;
  private static readonly BASE_CAPABILITIES: ReadonlySet<Capability> = new Set<Capability>(['checkpoint', 'fork']);
  private readonly runsc: RunscCli;
  private readonly checkpointer: GvisorCheckpointer;
  private readonly dataDir: string;
  private readonly cgroups: SandboxCgroups;
  private readonly maxProcesses: number;
  private readonly platform: GvisorPlatform;
  private readonly logger: DriverLogger | undefined;
  /** Last seen memory-cgroup `oom_kill` counter per sandbox. */
  private readonly oomKillsSeen = new Map<string, number>();
  /** Sandboxes whose exit was already reported. */
  private readonly exitReported = new Set<string>();
  /** Labels exec exits the sandbox cannot label (memory-limit kills, checkpoints of `runsc exec` commands). */
  private readonly exitReasons = new ExecExitReasons((sandboxId) => readOomKillCount(this.cgroups.memory(sandboxId)));
  /** The in-sandbox exec agents. */
  private readonly agents: AgentExec;
  /**
   * The sandboxes' networks (when {@link GvisorDriverOptions.network} is set): the resolver's seam
   * ({@link SandboxNetworks.allowResolvedAddresses}, {@link SandboxNetworks.sandboxForSourceAddress}).
   */
  readonly networks: SandboxNetworks | undefined;

  constructor(options: GvisorDriverOptions) {
    this.dataDir = options.dataDir;
    this.platform = options.platform ?? 'systrap';
    this.runsc = new RunscCli(
      options.runscPath ?? 'runsc',
      options.stateDir ?? join(options.dataDir, 'runsc'),
      this.platform,
      options.execAgent ?? true,
      options.network !== undefined,
    );
    this.networks =
      options.network === undefined
        ? undefined
        : new SandboxNetworks({
            ...options.network,
            instanceHash: cgroupParentHash(options.dataDir),
            sandboxDir: (id) => this.paths(id).dir,
          });
    this.capabilities =
      this.networks === undefined
        ? GvisorDriver.BASE_CAPABILITIES
        : new Set<Capability>([...GvisorDriver.BASE_CAPABILITIES, 'network']);
    this.maxProcesses = options.maxProcesses ?? 1024;
    this.logger = options.logger;
    this.cgroups = new SandboxCgroups({
      dataDir: options.dataDir,
      root: options.cgroupRoot,
      ownersDir: options.cgroupOwnersDir,
      warn: (object, message) => this.logger?.warn(object, message),
    });
    this.agents = new AgentExec({
      runsc: this.runsc,
      execAgent: options.execAgent ?? true,
      cacheDir: options.agentCacheDir ?? join(options.dataDir, 'agent-cache'),
      paths: (id) => this.paths(id),
      exitReasons: this.exitReasons,
      logger: this.logger,
    });
    this.checkpointer = new GvisorCheckpointer({
      runsc: this.runsc,
      imageEncryption:
        options.imageEncryption === undefined
          ? undefined
          : new ImageEncryption({
              key: options.imageEncryption.key,
              plainRoot:
                options.imageEncryption.plainRoot ?? `/dev/shm/burrow-images-${cgroupParentHash(options.dataDir)}`,
              memoryCgroupOf: (id) => this.cgroups.memory(id),
              warn: (object, message) => this.logger?.warn(object, message),
            }),
      paths: (id) => this.paths(id),
      prepareBundle: (o, made) => this.prepareBundle(o, made),
      runscStep: (id, args, step, signal) => this.runscStep(id, args, step, signal),
      started: (id, pid, cpuCount) => this.afterStart(id, pid, cpuCount),
      removeCgroups: async (id) => removeCgroupDirs(await this.cgroups.dirsOf(id)),
      goferGone: (id, pid) => goferGone(this.cgroups.pids(id), pid),
      create: (o) => this.create(o),
      delete: (id) => this.delete(id),
      warn: (object, message) => this.logger?.warn(object, message),
      info: (object, message) => this.logger?.info(object, message),
    });
  }

  pause(sandboxId: string, options: { signal?: AbortSignal } = {}): Promise<CheckpointInfo> {
    return this.agents.quiesced(sandboxId, () => this.checkpointer.pause(sandboxId, options.signal));
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
    await this.agents.hub.close(sandboxId);
    return this.checkpointer.stop(sandboxId);
  }

  fork(sandboxId: string, options: ForkOptions): Promise<void> {
    return this.agents.quiesced(sandboxId, () => this.checkpointer.fork(sandboxId, options));
  }

  snapshot(sandboxId: string, options: SnapshotOptions): Promise<CheckpointInfo> {
    if (!options.memory) return this.checkpointer.snapshot(sandboxId, options);
    return this.agents.quiesced(sandboxId, () => this.checkpointer.snapshot(sandboxId, options));
  }

  /**
   * Wait until the sandbox's exec agent is connected (for example before handing a fresh sandbox out, or in
   * tests). Resolves false after `timeoutMs` or when the sandbox has no agent listener.
   */
  execAgentReady(sandboxId: string, timeoutMs?: number): Promise<boolean> {
    return this.agents.ready(sandboxId, timeoutMs);
  }

  createFromSnapshot(options: CreateFromSnapshotOptions): Promise<void> {
    return this.checkpointer.createFromSnapshot(options);
  }

  async settle(sandboxId: string): Promise<void> {
    // A read-only inspection mount a crash left would hold the image while a resume mounts it read-write.
    await releaseInspectMount(this.paths(sandboxId).dir);
    await this.checkpointer.settle(sandboxId);
    // A crash between runsc's start or restore and afterStart left the container on its boot quota (every CPU).
    if ((await this.runsc.state(sandboxId))?.status === 'running')
      await enforceRecordedCpuLimit(this.cgroups, this.paths(sandboxId).dir, sandboxId);
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

  async resourceUsage(sandboxId: string): Promise<{ cpuNs: number; memoryBytes: number } | null> {
    return readCgroupUsage(this.cgroups.root, this.cgroups.parent, sandboxId);
  }

  startSupervised(sandboxId: string, options: SupervisedStartOptions): Promise<SupervisedStart | null> {
    return this.agents.startSupervised(sandboxId, options);
  }

  async spawn(sandboxId: string, options: SpawnOptions): Promise<void> {
    const result = await this.runsc.run(['exec', sandboxId, ...spawnRequestArgv(options)], { timeoutMs: 30_000 });
    if (result.exitCode === SPAWN_FIFO_GONE_EXIT) {
      throw new RuntimeError(
        `the sandbox's spawner cannot be reached: ${SPAWN_FIFO} was removed inside ${sandboxId}`,
        result.stderr,
        { code: ErrorCode.conflict },
      );
    }
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
    await this.cgroups.recordOwner();
    try {
      checkAbort();
      if (existing) await this.runsc.run(['delete', '-force', sandboxId]);
      await this.prepareBundle(options, made);
      await ensureGuestIdentity({
        rootfsDir: paths.rootfs,
        upperDir: paths.upperDir,
        hostname: options.hostname,
        network: this.networks !== undefined,
      });
      checkAbort();
      made.push(async () => {
        await this.runsc.run(['delete', '-force', sandboxId]);
        await removeCgroupDirs(await this.cgroups.dirsOf(sandboxId));
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
    const viaAgent = await this.agents.exec(sandboxId, options, oomKillsBefore);
    if (viaAgent !== null) return viaAgent;
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
    const oomKills = await readOomKillCount(this.cgroups.memory(sandboxId));
    if (oomKills !== null) {
      const seen = this.oomKillsSeen.get(sandboxId) ?? (await readOomKillsReported(paths.dir));
      if (oomKills > seen) {
        events.push({
          type: 'OOMKilled',
          reason: 'MemoryLimit',
          message: `${oomKills - seen} process(es) killed at the sandbox's memory limit`,
        });
        await writeOomKillsReported(paths.dir, oomKills);
      }
      this.oomKillsSeen.set(sandboxId, oomKills);
    }
    // A complete pause image wins: runsc reports the killed sentry as running until it is reaped.
    if (await this.checkpointer.isPaused(sandboxId)) return { status: 'paused', events };
    const state = await this.runsc.state(sandboxId);
    // A killed gofer leaves a sentry that runsc reports running but that can open no file: the runtime ended.
    const noGofer =
      state?.status === 'running' && state.pid > 0 && (await goferGone(this.cgroups.pids(sandboxId), state.pid));
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
   * its sandbox, which a later checkpoint by the next driver cannot save) and remove this instance's cgroup parent
   * where it is empty ({@link SandboxCgroups.removeParentIfEmpty}).
   */
  async close(): Promise<void> {
    await this.agents.hub.closeAll();
    await this.cgroups.removeParentIfEmpty();
  }

  /** {@link reapStaleCgroupParents}, as the reconciler's hook: `cgroup burrow/<hash>` per parent removed. */
  async reapHostLeftovers(): Promise<string[]> {
    return (await this.reapStaleCgroupParents()).map((hash) => `cgroup ${CGROUP_PARENT}/${hash}`);
  }

  /**
   * Remove the stale cgroup parents `burrow/<hash>` of other instances ({@link SandboxCgroups.reapStaleParents}).
   * @param options.unrecordedAgeMs @default 3_600_000 (1 hour)
   * @returns the hashes removed
   */
  reapStaleCgroupParents(options: { unrecordedAgeMs?: number } = {}): Promise<string[]> {
    return this.cgroups.reapStaleParents(options);
  }

  async delete(sandboxId: string, options: { signal?: AbortSignal } = {}): Promise<void> {
    if (options.signal?.aborted) throw abortError(options.signal);
    await this.agents.hub.close(sandboxId);
    this.agents.forgetAbsence(sandboxId);
    const paths = this.paths(sandboxId);
    await this.checkpointer.released(sandboxId);
    // SIGKILL every host process of the sandbox first (sentry, gofer, stubs: all in its pids cgroup): runsc's own
    // kill and delete can take a minute against a sandbox under a fork bomb, and a dead sandbox deletes at once.
    await killCgroupProcesses(this.cgroups.pids(sandboxId));
    if ((await this.runsc.state(sandboxId)) !== null && !(await this.runsc.forgetExited(sandboxId))) {
      await this.runsc.run(['kill', sandboxId, 'KILL']);
      await this.runsc.run(['delete', '-force', sandboxId]);
    }
    await unmountAll(paths.dir);
    await detachLoopDevices(paths.dir);
    await removeCgroupDirs(await this.cgroups.dirsOf(sandboxId));
    await this.networks?.teardown(sandboxId);
    await rm(paths.dir, { recursive: true, force: true });
    this.oomKillsSeen.delete(sandboxId);
    this.exitReported.delete(sandboxId);
    const remaining = await remainingResources(this.resourceSources(), sandboxId);
    if (this.networks !== undefined) remaining.push(...(await this.networks.remaining(sandboxId)));
    if (remaining.length > 0) {
      throw new RuntimeError(`sandbox ${sandboxId} was not fully removed`, remaining.join('\n'));
    }
    this.logger?.info({ sandboxId }, 'sandbox deleted');
  }

  async listHostResources(): Promise<HostResources> {
    const found = await listHostResources(this.resourceSources());
    if (this.networks === undefined) return found;
    const kinds = found.kinds ?? {};
    for (const id of await this.networks.sandboxIds()) kinds[id] = [...(kinds[id] ?? []), 'network' as const].sort();
    const sandboxIds = Object.keys(kinds).sort();
    return { sandboxIds, kinds };
  }

  async updateNetwork(sandboxId: string, policy: NetworkPolicy): Promise<void> {
    if (this.networks === undefined) throw new UnsupportedError('network');
    await this.networks.update(sandboxId, policy);
  }

  async networkUsage(sandboxId: string): Promise<NetworkUsage | null> {
    return this.networks === undefined ? null : this.networks.usage(sandboxId);
  }

  async ingressAddress(sandboxId: string): Promise<string | null> {
    return this.networks === undefined ? null : this.networks.uplinkAddress(sandboxId);
  }

  /** Where this instance's sandboxes leave things on the host. */
  private resourceSources(): { runsc: RunscCli; dataDir: string; cgroups: SandboxCgroups } {
    return { runsc: this.runsc, dataDir: this.dataDir, cgroups: this.cgroups };
  }

  async runscStep(sandboxId: string, args: string[], step: string, signal: AbortSignal | undefined): Promise<void> {
    const { logsDir } = this.paths(sandboxId);
    const outputFile = join(logsDir, 'init.log');
    const debugLog = join(logsDir, 'runsc-%COMMAND%.log');
    // runsc create hands its stdio to the sandbox: a file, never a pipe this process would wait on.
    // With a network, runsc sets it up at create, start and restore, from inside the sandbox's namespace.
    const netns =
      this.networks !== undefined && ['create', 'start', 'restore'].includes(args[0] ?? '')
        ? this.networks.guestNetnsPath(sandboxId)
        : undefined;
    const result = await this.runsc.run(args, { debugLog, signal, outputFile, netns });
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

  /**
   * Once a container runs (started or restored): its CPU limit (the bundle lets it boot on every host CPU, see
   * {@link prepareBundle}), the OOM preference of its stubs, its counters.
   * @throws RuntimeError when the CPU limit cannot be set (the caller undoes the start)
   */
  private async afterStart(sandboxId: string, sentryPid: number, cpuCount: number): Promise<void> {
    this.agents.hub.containerStarted(sandboxId);
    await setCpuQuota(this.cgroups.root, this.cgroups.parent, sandboxId, cpuCount);
    await openCpuset(this.cgroups.root, this.cgroups.parent, sandboxId);
    // A new container: no process in it holds a `runsc exec`'s descriptors.
    await clearRunscExecMark(this.paths(sandboxId).dir);
    await preferStubsForOomKill(sentryPid);
    const oomKills = (await readOomKillCount(this.cgroups.memory(sandboxId))) ?? 0;
    this.oomKillsSeen.set(sandboxId, oomKills);
    await writeOomKillsReported(this.paths(sandboxId).dir, oomKills);
    this.exitReported.delete(sandboxId);
  }

  /**
   * Mount the sandbox's disk (making it if absent) and overlay, and write its OCI bundle ({@link prepareBundle});
   * each step done is pushed onto `made` as its undo.
   */
  async prepareBundle(options: CreateOptions, made: Array<() => Promise<void>>): Promise<void> {
    const networks = this.networks;
    const bundle = prepareBundle(
      {
        paths: (id) => this.paths(id),
        cgroups: this.cgroups,
        agents: this.agents,
        platform: this.platform,
        maxProcesses: this.maxProcesses,
        netnsPath: networks === undefined ? undefined : (id) => networks.guestNetnsPath(id),
      },
      options,
      made,
    );
    if (networks === undefined) return bundle;
    // Before every create and restore: the namespaces (made when missing), the guest's address, the policy. They
    // need nothing of the disk or the bundle (only the namespace's path, fixed by the id), so they are made while
    // the disk mounts: about ten short processes that would otherwise add their time to every create and resume.
    crashPoint('network:before-setup');
    const network = networks.ensure(options.sandboxId, options.network ?? NO_NETWORK).catch(async (error) => {
      await networks.teardown(options.sandboxId).catch(() => undefined);
      throw error;
    });
    const [bundled, networked] = await Promise.allSettled([bundle, network]);
    if (networked.status === 'fulfilled' && networked.value) made.push(() => networks.teardown(options.sandboxId));
    if (bundled.status === 'rejected') throw bundled.reason;
    if (networked.status === 'rejected') throw networked.reason;
    crashPoint('network:after-setup');
  }

  /** Host paths of the sandbox's files. @throws RuntimeError for a malformed id */
  paths(sandboxId: string): SandboxPaths {
    return sandboxPaths(this.dataDir, sandboxId);
  }
}

/** File in a sandbox's host dir: see {@link readOomKillsReported}. */
const OOM_KILLS_REPORTED_FILE = 'oom-kills-reported';

/**
 * The sandbox's memory-cgroup `oom_kill` count last reported as an `OOMKilled` event, kept in its host dir so that a
 * server restart does not report the same kills again (the counter lives as long as the container). 0 when unknown.
 */
async function readOomKillsReported(sandboxDir: string): Promise<number> {
  const text = await readFile(join(sandboxDir, OOM_KILLS_REPORTED_FILE), 'utf8').catch(() => '');
  const count = Number.parseInt(text, 10);
  return Number.isSafeInteger(count) && count >= 0 ? count : 0;
}

async function writeOomKillsReported(sandboxDir: string, count: number): Promise<void> {
  await writeFile(join(sandboxDir, OOM_KILLS_REPORTED_FILE), `${count}\n`).catch(() => undefined);
}
