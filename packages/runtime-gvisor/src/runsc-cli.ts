import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { processAlive } from './host-plumbing.js';
import { type CommandResult, runCommand } from './run-command.js';

const STATUSES = new Set(['created', 'running', 'paused', 'stopped']);

/** The fields of runsc's `<id>_sandbox:<id>.state` file that {@link RunscCli.state} reads (runsc 0.0~20240729). */
function stateFileFields(file: unknown): { status: string; pid: number } | null {
  if (typeof file !== 'object' || file === null) return null;
  const { status, sandbox } = file as { status?: unknown; sandbox?: { pid?: unknown } | null };
  const pid = sandbox?.pid;
  if (typeof status !== 'string' || !STATUSES.has(status) || typeof pid !== 'number' || !Number.isInteger(pid)) {
    return null;
  }
  return { status, pid };
}

/**
 * The command that runs `file argv` in the network namespace `netns` with `/proc/sys/net/core` masked by a tmpfs in
 * a mount namespace of its own: runsc refuses to start a network where `/proc/sys/net/core/rmem_default` exists,
 * its sign of the host's root namespace, and on this kernel it exists in every namespace (research
 * probe-gvisor-2024 §4).
 */
function inNetns(netns: string, file: string, argv: readonly string[]): [string, string[]] {
  const script = 'mount -t tmpfs none /proc/sys/net/core && exec "$0" "$@"';
  return ['nsenter', [`--net=${netns}`, 'unshare', '-m', '/bin/sh', '-c', script, file, ...argv]];
}

/** gVisor platform: `systrap` (fast syscalls) or `ptrace` (cheaper process creation). */
export type GvisorPlatform = 'systrap' | 'ptrace';

/** Container state as `runsc state` reports it. */
export interface RunscState {
  id: string;
  /** `created`, `running`, `paused` or `stopped`. */
  status: string;
  /** Host pid of the sandbox (sentry) process, or -1. */
  pid: number;
}

/** Invokes runsc with the global flags that must be repeated on every call. */
export class RunscCli {
  constructor(
    readonly runscPath: string,
    readonly stateDir: string,
    readonly platform: GvisorPlatform,
    /** Let the sandbox connect to host Unix sockets (`--host-uds=open`), only for the exec agent. @default false */
    readonly hostUds = false,
    /**
     * Give sandboxes gVisor's own network stack (`--network=sandbox`) in the network namespace their spec names;
     * otherwise they have none (`--network=none`). @default false
     */
    readonly network = false,
  ) {}

  /** Global flags: host-overlay persistence and shared file access so host writes are seen at once. */
  globalFlags(extra: readonly string[] = []): string[] {
    return [
      '--root',
      this.stateDir,
      `--platform=${this.platform}`,
      ...(this.network ? ['--network=sandbox', '--net-disconnect-ok'] : ['--network=none']),
      '--overlay2=none',
      '--file-access=shared',
      // The exec agent inside connects to its host socket (docs/adr/0003); it opens no other host socket.
      ...(this.hostUds ? ['--host-uds=open'] : []),
      ...extra,
    ];
  }

  /** Run one runsc subcommand to completion. */
  run(
    args: readonly string[],
    options: {
      debugLog?: string;
      signal?: AbortSignal | undefined;
      timeoutMs?: number;
      outputFile?: string;
      /** Run inside this network namespace (path): runsc create, start and restore with a network must. */
      netns?: string | undefined;
    } = {},
  ): Promise<CommandResult> {
    const extra = options.debugLog === undefined ? [] : [`--debug-log=${options.debugLog}`];
    const argv = [...this.globalFlags(extra), ...args];
    const [file, fileArgs] =
      options.netns === undefined ? [this.runscPath, argv] : inNetns(options.netns, this.runscPath, argv);
    return runCommand(file, fileArgs, {
      signal: options.signal,
      timeoutMs: options.timeoutMs ?? 60_000,
      outputFile: options.outputFile,
    });
  }

  /**
   * State of one container, or null when runsc does not know it. Read from runsc's state file when it has the
   * fields this runsc version writes (a file read instead of a `runsc state` process: 50–150 ms each here, and the
   * reconciler, pause, resume and every exec ask). A container whose sandbox process has exited is `stopped`, also
   * when runsc wrote `paused` (runsc itself keeps saying `paused` for a container it held still whose sentry then
   * died, which made such a sandbox look alive). Falls back to `runsc state` when the file is missing fields or
   * mid-write.
   */
  async state(id: string): Promise<RunscState | null> {
    const fromFile = await this.stateFromFile(id);
    if (fromFile !== undefined) return fromFile;
    const result = await this.run(['state', id]);
    if (result.exitCode !== 0) return null;
    return JSON.parse(result.stdout) as RunscState;
  }

  /** The state file's view (see {@link state}); null when there is none, undefined when it cannot be read as expected. */
  private async stateFromFile(id: string): Promise<RunscState | null | undefined> {
    let text: string;
    try {
      text = await readFile(join(this.stateDir, `${id}_sandbox:${id}.state`), 'utf8');
    } catch (error) {
      return (error as NodeJS.ErrnoException).code === 'ENOENT' ? null : undefined;
    }
    let file: unknown;
    try {
      file = JSON.parse(text);
    } catch {
      return undefined;
    }
    const fields = stateFileFields(file);
    if (fields === null) return undefined;
    const live = fields.status === 'stopped' || (await processAlive(fields.pid));
    return { id, status: live ? fields.status : 'stopped', pid: fields.pid };
  }

  /**
   * Remove runsc's record of a container whose sandbox and gofer processes have both exited (zombies count), in
   * place of `runsc delete`: for such a container runsc only deletes the same files, after waiting until PID 1 has
   * reaped those processes, which this Firecracker guest's init does only every 1–2 s (docs/adr/0002). Waits up to
   * `waitMs` for the processes to exit.
   * @param waitMs longest wait for the sandbox and gofer processes to exit, ms. @default 2000
   * @returns true when the record is gone (or there was none); false when a process still runs after the wait or
   *   the state file is not in the form this runsc version writes (use `runsc delete` then)
   */
  async forgetExited(id: string, waitMs = 2000): Promise<boolean> {
    const base = join(this.stateDir, `${id}_sandbox:${id}`);
    let file: unknown;
    try {
      file = JSON.parse(await readFile(`${base}.state`, 'utf8'));
    } catch (error) {
      return (error as NodeJS.ErrnoException).code === 'ENOENT';
    }
    const fields = stateFileFields(file);
    const goferPid = (file as { goferPid?: unknown }).goferPid;
    if (fields === null || typeof goferPid !== 'number') return false;
    const deadline = Date.now() + waitMs;
    while ((await processAlive(fields.pid)) || (await processAlive(goferPid))) {
      if (Date.now() >= deadline) return false;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    for (const path of [`${base}.state`, `${base}.lock`, join(this.stateDir, `runsc-${id}.sock`)]) {
      await rm(path, { force: true });
    }
    return true;
  }

  /** Ids of every container in the state dir. */
  async list(): Promise<string[]> {
    const result = await this.run(['list', '-quiet']);
    if (result.exitCode !== 0) return [];
    return result.stdout.split('\n').filter((line) => line.trim() !== '');
  }
}
