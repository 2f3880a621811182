import type { Readable, Writable } from 'node:stream';
import type { Resources } from '@burrow/contract';

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
  signal?: AbortSignal;
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
}

/** How a process ended: exactly one of `exitCode` and `signal` is non-null. */
export interface ProcessExit {
  exitCode: number | null;
  /** Signal name such as `SIGKILL`. */
  signal: string | null;
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
  /** `running` when the container runs, `stopped` when it exists but its init ended, `missing` when nothing is on the host. */
  status: 'running' | 'stopped' | 'missing';
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

/** Host resources found by {@link RuntimeDriver.listHostResources}, keyed by sandbox id. */
export interface HostResources {
  sandboxIds: string[];
}

/**
 * The isolation backend behind one interface. Every verb is idempotent: creating an existing sandbox or
 * deleting a missing one succeeds without side effects.
 */
export interface RuntimeDriver {
  /** Short name, for example `gvisor`. */
  readonly name: string;
  readonly capabilities: ReadonlySet<Capability>;
  /** Create and start a sandbox. On failure nothing of it is left on the host. @throws RuntimeError */
  create(options: CreateOptions): Promise<void>;
  /** Start a process in a running sandbox. @throws RuntimeError if the sandbox does not run */
  exec(sandboxId: string, options: ExecOptions): Promise<SandboxProcess>;
  /**
   * Host path of the sandbox's root filesystem while it exists. File calls resolve paths beneath it with
   * {@link SandboxFs}, never by joining strings.
   */
  rootDir(sandboxId: string): string;
  /** What the host sees of the sandbox now. */
  observe(sandboxId: string): Promise<ObservedSandbox>;
  /** Remove the container, mounts, cgroups and every file of the sandbox, then verify none is left. @throws RuntimeError if something remains */
  delete(sandboxId: string, options?: { signal?: AbortSignal }): Promise<void>;
  /** Ids of every sandbox that has any resource on this host (containers, mounts, cgroups, directories). */
  listHostResources(): Promise<HostResources>;
}

/** A runtime step failed. `details` carries the runtime's own output for the log. */
export class RuntimeError extends Error {
  override readonly name = 'RuntimeError';
  constructor(
    message: string,
    readonly details?: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** The driver lacks the capability the call needs. */
export class UnsupportedError extends Error {
  override readonly name = 'UnsupportedError';
  constructor(readonly capability: Capability) {
    super(`this runtime does not support ${capability}`);
  }
}
