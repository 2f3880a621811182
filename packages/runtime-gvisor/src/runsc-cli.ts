import { type CommandResult, runCommand } from './run-command.js';

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
  ) {}

  /** Global flags: host-overlay persistence and shared file access so host writes are seen at once. */
  globalFlags(extra: readonly string[] = []): string[] {
    return [
      '--root',
      this.stateDir,
      `--platform=${this.platform}`,
      '--network=none',
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
    options: { debugLog?: string; signal?: AbortSignal | undefined; timeoutMs?: number; outputFile?: string } = {},
  ): Promise<CommandResult> {
    const extra = options.debugLog === undefined ? [] : [`--debug-log=${options.debugLog}`];
    return runCommand(this.runscPath, [...this.globalFlags(extra), ...args], {
      signal: options.signal,
      timeoutMs: options.timeoutMs ?? 60_000,
      outputFile: options.outputFile,
    });
  }

  /** State of one container, or null when runsc does not know it. */
  async state(id: string): Promise<RunscState | null> {
    const result = await this.run(['state', id]);
    if (result.exitCode !== 0) return null;
    return JSON.parse(result.stdout) as RunscState;
  }

  /** Ids of every container in the state dir. */
  async list(): Promise<string[]> {
    const result = await this.run(['list', '-quiet']);
    if (result.exitCode !== 0) return [];
    return result.stdout.split('\n').filter((line) => line.trim() !== '');
  }
}
