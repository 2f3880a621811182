import type { ExecResult } from '@burrow/contract';
import { ErrorCode, EXEC_OUTPUT_CAP_BYTES } from '@burrow/contract';
import { type RuntimeDriver, RuntimeError, SandboxFs, type SandboxProcess } from '@burrow/runtime';
import type { Logger } from 'pino';
import type { ActivityTracker } from '../lifecycle/activity-tracker.js';
import type { SandboxRecord } from '../store/sandbox-store.js';
import { ApiError } from '../util/api-error.js';
import type { Clock } from '../util/clock.js';
import { newId } from '../util/ids.js';
import type { KeyedMutex } from '../util/keyed-mutex.js';
import { toArgv } from './command-argv.js';
import { followDetached } from './detached-exec.js';
import type { Principal } from './key-service.js';
import type { SandboxService } from './sandbox-service.js';
import { LOG_MAX_SEGMENTS, LOG_SEGMENT_BYTES } from './supervisor-script.js';
import { resolveUser } from './user-lookup.js';

/** An exec request after contract defaults are applied. */
export interface ExecInput {
  cmd: string | string[];
  env: Record<string, string>;
  cwd?: string | undefined;
  /** User name or uid inside the sandbox. */
  user?: string | undefined;
  timeoutMs: number;
  /** base64 */
  stdin?: string | undefined;
  /**
   * Keep the command running as a supervised command with this id when its connection to the host ends first (a
   * pause, fork or memory snapshot; see `ExecOptions.detachAs`). @default not kept (it ends with the connection)
   */
  detachAs?: string | undefined;
}

/** A started command and what the caller needs to supervise it. */
export interface StartedExec {
  process: SandboxProcess;
  sandbox: SandboxRecord;
  startedAtMs: number;
}

export { toArgv } from './command-argv.js';

/** Collects up to `capBytes` of a stream and notes whether more came. */
export class CappedBuffer {
  private readonly chunks: Buffer[] = [];
  private size = 0;
  truncated = false;
  constructor(private readonly capBytes: number) {}

  push(chunk: Buffer): void {
    const room = this.capBytes - this.size;
    if (room <= 0) {
      if (chunk.length > 0) this.truncated = true;
      return;
    }
    const kept = chunk.length > room ? chunk.subarray(0, room) : chunk;
    if (kept.length < chunk.length) this.truncated = true;
    this.chunks.push(kept);
    this.size += kept.length;
  }

  toBuffer(): Buffer {
    return Buffer.concat(this.chunks, this.size);
  }
}

/** Commands inside sandboxes, whole (buffered) or streamed. */
export class ExecService {
  constructor(
    private readonly deps: {
      sandboxes: SandboxService;
      driver: RuntimeDriver;
      mutex: KeyedMutex;
      clock: Clock;
      logger: Logger;
      /** Marks the sandbox busy while a command runs (absent: not tracked). */
      activity?: ActivityTracker | undefined;
      /** Cap per output stream, bytes. @default EXEC_OUTPUT_CAP_BYTES (16 MiB) */
      outputCapBytes?: number;
    },
  ) {}

  /**
   * Start a command in a running sandbox. The id's lock is held only while starting, so a delete can proceed
   * (and end the command) while it runs.
   * @throws ApiError `sandbox_not_found`, `sandbox_not_running`, `runtime_error`
   */
  async start(caller: Principal, id: string, input: ExecInput, signal?: AbortSignal): Promise<StartedExec> {
    return this.deps.mutex.run(id, async () => {
      const sandbox = await this.deps.sandboxes.requireRunning(caller.tenantId, id);
      if (sandbox.state !== 'running') {
        throw new ApiError(ErrorCode.sandboxNotRunning, `sandbox ${id} is ${sandbox.state}, not running`, {
          hint:
            sandbox.state === 'error'
              ? 'start it again (its disk and files are kept) or delete it'
              : 'wait until it runs, then retry',
        });
      }
      const user =
        input.user === undefined
          ? undefined
          : await resolveUser(new SandboxFs(this.deps.driver.rootDir(id)), input.user);
      try {
        const process = await this.deps.driver.exec(id, {
          argv: toArgv(input.cmd),
          env: {
            ...sandbox.env,
            ...(user === undefined ? {} : { HOME: user.home, USER: user.name, LOGNAME: user.name }),
            ...input.env,
          },
          cwd: input.cwd ?? sandbox.cwd,
          ...(user === undefined ? {} : { user: { uid: user.uid, gid: user.gid } }),
          ...(signal === undefined ? {} : { signal }),
          ...(input.detachAs === undefined
            ? {}
            : {
                detachAs: {
                  commandId: input.detachAs,
                  segmentBytes: LOG_SEGMENT_BYTES,
                  maxSegments: LOG_MAX_SEGMENTS,
                },
              }),
        });
        // A running command (buffered or streamed) is activity: the sandbox is never idle until it ends.
        const release = this.deps.activity?.hold(id);
        if (release !== undefined) process.exited.then(release, release);
        return { process, sandbox, startedAtMs: this.deps.clock.nowMs() };
      } catch (error) {
        const refreshed = await this.deps.sandboxes.refresh(sandbox).catch(() => sandbox);
        if (refreshed.state !== 'running') {
          throw new ApiError(ErrorCode.sandboxNotRunning, `sandbox ${id} is ${refreshed.state}, not running`, {
            hint: 'start it again (its disk and files are kept) or delete it',
            cause: error,
          });
        }
        if (error instanceof RuntimeError && error.code === ErrorCode.invalidRequest) {
          throw new ApiError(ErrorCode.invalidRequest, error.message, {
            hint: 'pass a cwd that exists in the sandbox (create it with files mkdir)',
            cause: error,
          });
        }
        throw new ApiError(ErrorCode.runtimeError, `could not start the command: ${(error as Error).message}`, {
          hint: 'retry; if it persists, see the server log under this request id',
          cause: error,
        });
      }
    });
  }

  /**
   * Run a command to completion: stdin written then closed, output kept up to the cap per stream, its process
   * group killed with SIGKILL after `timeoutMs` (reported as `timedOut: true`, signal SIGKILL, never an exit code).
   * A pause, fork or memory snapshot while it runs does not end it: the answer waits until the sandbox runs again
   * and the command ends, with all its output. The timeout is enforced until such a checkpoint only.
   * @throws ApiError as {@link start}; `sandbox_not_found` when the sandbox is deleted while the answer waits
   */
  async run(caller: Principal, id: string, input: ExecInput): Promise<ExecResult> {
    const { process, startedAtMs } = await this.start(caller, id, { ...input, detachAs: newId('cmd') });
    // No child logger per exec: creating one cost more than the rest of this method.
    const logger = this.deps.logger;
    const cap = this.deps.outputCapBytes ?? EXEC_OUTPUT_CAP_BYTES;
    const stdout = new CappedBuffer(cap);
    const stderr = new CappedBuffer(cap);
    process.stdout.on('data', (c: Buffer) => stdout.push(c));
    process.stderr.on('data', (c: Buffer) => stderr.push(c));
    process.stdin.on('error', () => undefined);
    process.stdin.end(input.stdin === undefined ? undefined : Buffer.from(input.stdin, 'base64'));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      process
        .kill('SIGKILL')
        .catch((error: unknown) => logger.warn({ err: error, sandboxId: id }, 'kill after timeout failed'));
    }, input.timeoutMs);
    try {
      let exit = await process.exited;
      if (exit.detached !== undefined) {
        // The host-side timeout ends here: what is left of the command runs on to its end inside the sandbox.
        clearTimeout(timer);
        exit = await followDetached(this.deps, caller.tenantId, id, exit.detached, (chunk) =>
          (chunk.channel === 2 ? stderr : stdout).push(chunk.data),
        );
      }
      const durationMs = this.deps.clock.nowMs() - startedAtMs;
      if (logger.isLevelEnabled('debug')) logger.debug({ sandboxId: id, exit, durationMs, timedOut }, 'exec finished');
      return {
        exitCode: timedOut ? null : exit.exitCode,
        signal: timedOut ? 'SIGKILL' : exit.signal,
        timedOut,
        reason: timedOut ? null : (exit.reason ?? null),
        durationMs,
        stdout: stdout.toBuffer().toString('base64'),
        stderr: stderr.toBuffer().toString('base64'),
        truncated: stdout.truncated || stderr.truncated,
      };
    } finally {
      clearTimeout(timer);
    }
  }
}
