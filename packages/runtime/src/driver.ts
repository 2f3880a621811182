import type { Readable, Writable } from 'node:stream';
import type { ErrorCode, ExitReason, NetworkPolicy, NetworkUsage, Resources } from '@burrow/contract';

/** Optional features a driver may have. Calling an unsupported one throws {@link UnsupportedError}. */
export type Capability = 'checkpoint' | 'fork' | 'pty' | 'network';

/** A template root filesystem the node has on disk. */
export interface TemplateRef {
  /** Content address of the template. */
  id: string;
  /** Absolute host path of the read-only root filesystem directory. */
  rootfsDir: string;
}

/** Options of {@link RuntimeDriver.create}. */
export interface CreateOptions {
  /** Sandbox id; fixed length (`sbx_` + 20 characters), used as the container id. */
  sandboxId: string;
  template: TemplateRef;
  resources: Resources;
  /** Hostname seen inside the sandbox. */
  hostname: string;
  /**
   * The sandbox's network policy, for a driver with the `network` capability (others ignore it). A resume, a
   * restore and a fork child pass the policy in force. @default `{ mode: 'none' }`
   */
  network?: NetworkPolicy | undefined;
  /**
   * Host directories bound into the sandbox (volumes), fixed for its life: a resume, restore or fork child passes
   * the same paths (the checkpoint image names them). @default none
   */
  volumes?: readonly VolumeBind[] | undefined;
  signal?: AbortSignal;
}

/** A host directory (a volume's root) bound into a sandbox. */
export interface VolumeBind {
  /** Absolute host path of the directory. */
  hostPath: string;
  /** Absolute path inside the sandbox (normalized, not reserved: the caller checks). */
  path: string;
  readOnly: boolean;
}

/** Options of {@link RuntimeDriver.exec}. */
export interface ExecOptions {
  /** Program and arguments; no shell is involved. */
  argv: string[];
  /** Full environment of the process (the caller merges defaults). */
  env: Record<string, string>;
  /** Absolute working directory inside the sandbox. */
  cwd: string;
  /** Numeric user and group the process runs as. @default the sandbox's (root, 0:0) */
  user?: { uid: number; gid: number };
  signal?: AbortSignal;
  /**
   * Keep the command running when its connection to the host ends before it does (a pause, fork or memory snapshot
   * quiesces every host connection; a server that went away): it goes on as the supervised command `commandId`
   * (its files in `/.burrow/commands/<commandId>/`, output in a ring of `maxSegments` segments of `segmentBytes`),
   * and the process ends with `detached`. Drivers that cannot keep it end it as before. @default not detachable
   */
  detachAs?: { commandId: string; segmentBytes: number; maxSegments: number } | undefined;
}

/** How a process ended: exactly one of `exitCode` and `signal` is non-null. */
export interface ProcessExit {
  exitCode: number | null;
  /** Signal name such as `SIGKILL`. */
  signal: string | null;
  /** Why it ended when the host knows it did not end by itself (a memory-limit kill, a checkpoint). @default none */
  reason?: ExitReason | undefined;
  /**
   * Set when the process did not end but was detached ({@link ExecOptions.detachAs}; `exitCode` and `signal` are
   * null): it runs on as command `commandId`, and `offset` is the count of output bytes (both streams) delivered
   * here, where its log continues.
   */
  detached?: { commandId: string; offset: number } | undefined;
}

/** A process running inside a sandbox. Its streams are raw bytes. */
export interface SandboxProcess {
  readonly stdin: Writable;
  readonly stdout: Readable;
  readonly stderr: Readable;
  /**
   * Send a signal to the process's whole process group inside the sandbox (not to a host helper), so a shell and
   * the children it started end together. Resolves once delivered.
   */
  kill(signal: NodeJS.Signals): Promise<void>;
  /**
   * Resolves when the process has exited and both output streams have ended. A background child that inherited
   * the output keeps it open; drivers end the streams a short grace after the process itself exited.
   */
  readonly exited: Promise<ProcessExit>;
}

/** What the host observes about a sandbox. */
export interface ObservedSandbox {
  /**
   * `running` when the container runs, `paused` when no container runs but a complete checkpoint image is kept,
   * `stopped` when the disk is kept without a running init, `missing` when nothing is on the host.
   */
  status: 'running' | 'paused' | 'stopped' | 'missing';
  /** Events since the previous call, for example a memory-limit kill. */
  events: RuntimeEvent[];
}

/** A notable thing the runtime saw, reported as a sandbox condition. */
export interface RuntimeEvent {
  /** Condition type, for example `OOMKilled` or `RuntimeExited`. */
  type: string;
  reason: string;
  message: string;
}

/** Kinds of host resource a sandbox can hold, for leak counts. */
export type HostResourceKind = 'container' | 'mount' | 'loop_device' | 'cgroup' | 'directory' | 'network';

/** Host resources found by {@link RuntimeDriver.listHostResources}, keyed by sandbox id. */
export interface HostResources {
  sandboxIds: string[];
  /** Which kinds each id holds (drivers that can tell); ids absent here count as `directory`. */
  kinds?: Record<string, HostResourceKind[]>;
}

/** Options of {@link RuntimeDriver.inspectDisk}. */
export interface InspectDiskOptions {
  /** The sandbox's template (the overlay's lower layer) to tell added from modified files. */
  template: TemplateRef;
  /** Most changed paths listed; the rest only counted. */
  maxChanges: number;
  /** Deepest directory level reported in {@link DiskInspection.directories} (1 = `/root`, 2 = `/root/src`). */
  maxDepth: number;
  /** Most directories listed, largest first. */
  maxDirectories: number;
}

/** One path the sandbox changed relative to its template. */
export interface DiskChange {
  /** Absolute path inside the sandbox. */
  path: string;
  /** `added`: not in the template; `modified`: replaces a template entry; `deleted`: a template entry removed. */
  kind: 'added' | 'modified' | 'deleted';
  type: 'file' | 'directory' | 'symlink' | 'other';
  /** Bytes the entry occupies on the sandbox's disk (allocated); 0 for deletions. */
  sizeBytes: number;
}

/** What {@link RuntimeDriver.inspectDisk} found, read without changing the sandbox. */
export interface DiskInspection {
  /** Bytes the sandbox's writable layer occupies (allocated blocks of everything it wrote). */
  usedBytes: number;
  /** Its disk limit, bytes. */
  limitBytes: number;
  /** Directories of the writable layer by allocated bytes (their whole subtree), largest first. */
  directories: Array<{ path: string; bytes: number }>;
  /** Changes since the template, in path order, at most `maxChanges`. */
  changes: DiskChange[];
  /** Counts over every change, listed or not. */
  counts: { added: number; modified: number; deleted: number };
  /** True when `changes` was cut at `maxChanges`. */
  truncated: boolean;
}

/**
 * The isolation backend behind one interface. Every verb is idempotent: creating an existing sandbox or
 * deleting a missing one succeeds without side effects.
 */
export interface RuntimeDriver extends PersistenceVerbs {
  /** Short name, for example `gvisor`. */
  readonly name: string;
  readonly capabilities: ReadonlySet<Capability>;
  /** Create and start a sandbox. On failure nothing of it is left on the host. @throws RuntimeError */
  create(options: CreateOptions): Promise<void>;
  /** Start a process in a running sandbox. @throws RuntimeError if the sandbox does not run */
  exec(sandboxId: string, options: ExecOptions): Promise<SandboxProcess>;
  /**
   * Host path of the sandbox's root filesystem while it exists. File calls resolve paths beneath it with
   * {@link SandboxFs}, never by joining strings. It does not show `/tmp`: that is a tmpfs in the sandbox's memory
   * (docs/adr/0005), and the directory of that name here is the disk's, hidden inside.
   */
  rootDir(sandboxId: string): string;
  /** What the host sees of the sandbox now. */
  observe(sandboxId: string): Promise<ObservedSandbox>;
  /** Remove the container, mounts, cgroups and every file of the sandbox, then verify none is left. @throws RuntimeError if something remains */
  delete(sandboxId: string, options?: { signal?: AbortSignal }): Promise<void>;
  /** Ids of every sandbox that has any resource on this host (containers, mounts, cgroups, directories). */
  listHostResources(): Promise<HostResources>;
  /**
   * Remove host leftovers that belong to no sandbox and no live instance (gVisor: the empty cgroup parents of
   * instances whose data dir is gone). Optional; the reconciler calls it each pass.
   * @returns a name for each leftover removed
   */
  reapHostLeftovers?(): Promise<string[]>;
  /**
   * Disk use and changes since the template of a running, paused or stopped sandbox, without changing it: a disk
   * that is not mounted is mounted read-only (never read-write) for the look and unmounted after. Optional.
   * @throws RuntimeError when nothing of the sandbox is on the host
   */
  inspectDisk?(sandboxId: string, options: InspectDiskOptions): Promise<DiskInspection>;
  /** Bytes the sandbox occupies on the host disk (allocated: disk image, pause image). Optional; 0 when gone. */
  diskUsageBytes?(sandboxId: string): Promise<number>;
  /**
   * CPU time and memory the sandbox's cgroups have counted: `cpuNs` cumulative nanoseconds of CPU since the sandbox
   * started, `memoryBytes` memory charged now. Optional; null when the sandbox has no cgroup on this host (not running).
   */
  resourceUsage?(sandboxId: string): Promise<{ cpuNs: number; memoryBytes: number } | null>;
  /**
   * Wait until exec in a just created or resumed sandbox takes its fast path (gVisor: the in-sandbox exec agent
   * connected). Exec works before that too (slower); the warm pool waits so it hands out only ready sandboxes.
   * Optional; resolves false after `timeoutMs` (driver default, a few seconds) or when there is no fast path.
   */
  execAgentReady?(sandboxId: string, timeoutMs?: number): Promise<boolean>;
  /**
   * Start a background command under an in-sandbox supervisor that keeps its state and output in `options.dir`
   * (layout: docs/exec-protocol.md §3) and outlives pause, resume and fork. Resolves with the command's pid once it
   * runs, before the supervisor wrote `state.json` (the caller writes it from the answer; a program that cannot run
   * resolves too: its exit file says 127 or 126), or null when the driver has no such fast path for this sandbox (then the caller starts its own supervisor with {@link PersistenceVerbs.spawn}).
   * Optional.
   * @throws RuntimeError when the sandbox does not run or the supervisor could not start
   */
  startSupervised?(sandboxId: string, options: SupervisedStartOptions): Promise<SupervisedStart | null>;
  /**
   * Replace the network policy of a sandbox that has host network plumbing (running, paused or stopped), whole or
   * not at all; new connections follow it within a second. Optional (capability `network`).
   * @throws RuntimeError when the sandbox has no network on this host, or the rules cannot be applied
   */
  updateNetwork?(sandboxId: string, policy: NetworkPolicy): Promise<void>;
  /** Bytes the sandbox sent and received over its network, or null when it has none here. Optional. */
  networkUsage?(sandboxId: string): Promise<NetworkUsage | null>;
  /**
   * The host address at which the sandbox's TCP ports answer (a connection from this host to `<address>:<port>`
   * reaches `<port>` inside the sandbox), or null when it has no network here. Optional (capability `network`).
   */
  ingressAddress?(sandboxId: string): Promise<string | null>;

  /**
   * Release what the driver holds in this process (listeners, connections to in-sandbox agents) at server
   * shutdown; sandboxes keep running and a new driver takes them over. Optional.
   */
  close?(): Promise<void>;
}

/** What a checkpoint (pause, fork point, snapshot) wrote. */
export interface CheckpointInfo {
  /** Bytes of the process and memory image (0 for a filesystem-only snapshot). */
  imageSizeBytes: number;
  /** Bytes the disk occupies on the host (allocated, not apparent size). */
  diskSizeBytes: number;
  /** Runtime version and platform the image needs to restore, for example `runsc 0.0~20240729.0 systrap`. */
  runtimeVersion: string;
}

/** One new sandbox of {@link RuntimeDriver.fork}. */
export interface ForkChild {
  /** Id of the new sandbox. */
  sandboxId: string;
  /** Its own hostname, set inside after the restore (the image carries the parent's). */
  hostname: string;
  /** Its volume binds, at the parent's paths (a forked volume's own copy, or the parent's). @default the parent's */
  volumes?: readonly VolumeBind[] | undefined;
}

/** Options of {@link RuntimeDriver.fork}. */
export interface ForkOptions {
  /** The parent's template (the children share its read-only lower layer). */
  template: TemplateRef;
  resources: Resources;
  /** The parent's network policy, which every child inherits (see {@link CreateOptions.network}). */
  network?: NetworkPolicy | undefined;
  /** The parent's volume binds, which a child without its own gets. @default none */
  volumes?: readonly VolumeBind[] | undefined;
  children: ForkChild[];
  signal?: AbortSignal;
}

/** Options of {@link RuntimeDriver.snapshot}. */
export interface SnapshotOptions {
  /** Empty or absent host directory the snapshot is written to (disk, image, manifest with checksums). */
  targetDir: string;
  /** Include processes and memory (capability `checkpoint`); otherwise the disk only. */
  memory: boolean;
  signal?: AbortSignal;
}

/** Options of {@link RuntimeDriver.createFromSnapshot}. */
export interface CreateFromSnapshotOptions extends CreateOptions {
  /** Host directory written by {@link RuntimeDriver.snapshot}; read only. */
  sourceDir: string;
  /** Restore processes and memory (needs a snapshot with memory); otherwise boot fresh on a copy of its disk. */
  memory: boolean;
}

/** Options of {@link RuntimeDriver.startSupervised}. */
export interface SupervisedStartOptions {
  /** The command's directory inside the sandbox, under `/.burrow/commands/`; it exists (the caller wrote its spec). */
  dir: string;
  argv: string[];
  /** Full environment of the command. */
  env: Record<string, string>;
  /** Absolute working directory inside the sandbox. */
  cwd: string;
  /** Run as this user (root when absent). */
  user?: { uid: number; gid: number } | undefined;
  /** Kill the whole process tree after this long (ms of the sandbox's running time), none when absent. */
  timeoutMs?: number | undefined;
  /** A terminal of this size instead of pipes. */
  pty?: { cols: number; rows: number } | undefined;
  /** Bytes per output log segment. */
  segmentBytes: number;
  /** Segments kept (the ring holds between `(maxSegments - 1) × segmentBytes` and `maxSegments × segmentBytes`). */
  maxSegments: number;
}

/** A background command {@link RuntimeDriver.startSupervised} started. */
export interface SupervisedStart {
  /** The command's pid inside the sandbox. */
  pid: number;
  /** Its supervisor's pid inside the sandbox. */
  supervisorPid: number;
  /** When it started, ms since the epoch (the sandbox's clock). */
  startedAtMs: number;
}

/** Options of {@link PersistenceVerbs.spawn}. */
export interface SpawnOptions {
  /** Program and arguments; no newline anywhere. */
  argv: string[];
  /** Full environment of the process. */
  env: Record<string, string>;
  /** Absolute working directory inside the sandbox. */
  cwd: string;
}

/**
 * Persistence verbs of a driver. `stop`, `create` on a stopped sandbox (start) and filesystem-only snapshots work
 * on every driver; `pause`, `resume`, memory snapshots need the `checkpoint` capability, `fork` needs `fork`.
 * Unsupported calls throw {@link UnsupportedError}. Every verb is idempotent and safe to call again after a crash
 * in the middle of it: it finishes the step or leaves the sandbox as it was.
 */
export interface PersistenceVerbs {
  /**
   * Checkpoint processes and memory with the disk frozen, then release the container, CPU, memory and mounts:
   * a paused sandbox costs only disk. A failed checkpoint leaves the sandbox running.
   * @throws UnsupportedError without `checkpoint`; RuntimeError when the checkpoint fails (the sandbox still runs)
   */
  pause(sandboxId: string, options?: { signal?: AbortSignal }): Promise<CheckpointInfo>;
  /**
   * Restore a paused sandbox under the same id after verifying the image's and disk's checksums and the runtime
   * version. On failure the sandbox stays paused and its image intact.
   * @throws CheckpointRejectedError for a tampered, truncated or foreign image; RuntimeError when the restore fails
   */
  resume(options: CreateOptions): Promise<void>;
  /** End every process and release the container and mounts; the disk stays. `create` boots it again. */
  stop(sandboxId: string, options?: { signal?: AbortSignal }): Promise<void>;
  /**
   * New sandboxes restored from one checkpoint of `sandboxId` (running: held still only for the checkpoint; or
   * paused), each on its own copy of the disk, with its own hostname and fresh kernel randomness.
   * @throws UnsupportedError without `fork`; RuntimeError (no child is left on the host)
   */
  fork(sandboxId: string, options: ForkOptions): Promise<void>;
  /** Write a self-contained, checksummed copy of the sandbox's state into `options.targetDir`. */
  snapshot(sandboxId: string, options: SnapshotOptions): Promise<CheckpointInfo>;
  /** Create a sandbox from a snapshot directory after verifying its checksums. @throws CheckpointRejectedError */
  createFromSnapshot(options: CreateFromSnapshotOptions): Promise<void>;
  /**
   * Finish or undo a host step a crash interrupted (for example a fork that left the parent held still). Called by
   * the reconciler for every sandbox at start.
   */
  settle(sandboxId: string): Promise<void>;
  /**
   * Start a detached process (stdio on /dev/null) from the sandbox's init, so it survives pause, resume and fork
   * with its pid. Processes started by {@link RuntimeDriver.exec} end at a resume on gVisor. Resolves once the
   * request is handed over, not when the process runs.
   * @throws RuntimeError if the sandbox does not run or the argv holds a newline
   */
  spawn(sandboxId: string, options: SpawnOptions): Promise<void>;
}

/** A checkpoint image or snapshot failed verification: altered, truncated, or written by another runtime version. */
export class CheckpointRejectedError extends Error {
  override readonly name = 'CheckpointRejectedError';
}

/**
 * A runtime step failed. `details` carries the runtime's own output for the log. `code` is set when the failure
 * is the caller's mistake (for example a cwd that does not exist: `invalid_request`), so the API can answer 4xx.
 */
export class RuntimeError extends Error {
  override readonly name = 'RuntimeError';
  readonly code: ErrorCode | undefined;
  constructor(
    message: string,
    readonly details?: string,
    options?: { cause?: unknown; code?: ErrorCode },
  ) {
    super(message, options);
    this.code = options?.code;
  }
}

/** Why a sandbox cannot be checkpointed now: something in it that the runtime cannot save. */
export type CheckpointBlockReason = 'deleted_file_open' | 'host_socket_open';

/** A process in the sandbox that keeps it from being checkpointed, and what it holds. */
export interface CheckpointBlocker {
  /** Process id inside the sandbox, or null when the runtime could not tell which process. */
  pid: number | null;
  /** Its command line (at most 200 characters), or null when unknown. */
  command: string | null;
  /** The path it holds: a deleted file it keeps open, its deleted working directory, or a host socket. */
  path: string;
}

/**
 * A pause, fork or memory snapshot is refused because of the sandbox's own state (a process holds something the
 * runtime cannot save); the sandbox keeps running unchanged. Retrying helps only once that process lets go.
 */
export class CheckpointBlockedError extends RuntimeError {
  constructor(
    message: string,
    readonly reason: CheckpointBlockReason,
    /** The processes and paths found; empty when the runtime could not tell. */
    readonly blockers: readonly CheckpointBlocker[],
    details?: string,
  ) {
    super(message, details);
  }
}

/** The driver lacks the capability the call needs. */
export class UnsupportedError extends Error {
  override readonly name = 'UnsupportedError';
  constructor(readonly capability: Capability) {
    super(`this runtime does not support ${capability}`);
  }
}
