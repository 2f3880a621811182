import type { CommandInfo, E2bProcessRequests } from '@burrow/contract';
import type { SandboxFs } from '@burrow/runtime';
import type { z } from 'zod';
import { LogCursor } from '../../services/command-log-reader.js';
import { ControlKind, commandDir, readExit } from '../../services/command-service.js';
import type { Principal } from '../../services/key-service.js';
import type { Services } from '../../services/services.js';
import { resizePayload } from '../command-routes.js';
import { ConnectError, type ServerStream } from './connect-protocol.js';

/**
 * envd's `process.Process` service mapped onto Burrow's background commands (CommandService): an E2B process is a
 * background command, its E2B pid the command's pid inside the sandbox. Background commands run under the
 * in-sandbox supervisor, so they outlive the client's stream, a server restart and a pause/resume, and their
 * output is read back from the supervisor's log. The whole mapping lives in this file, so a change of Burrow's
 * process model touches only it.
 */

/** Who calls and where: the sandbox, its tenant, the user and the default working directory of the call. */
export interface EnvdContext {
  caller: Principal;
  sandboxId: string;
  /** User name the process runs as (absent: the sandbox's own default, root). */
  user: string | undefined;
  /** Working directory when the request names none. */
  cwd: string;
}

type StartRequest = z.infer<typeof E2bProcessRequests.Start>;
type Selector = z.infer<typeof E2bProcessRequests.Connect>['process'];

/** What E2B's `List` shows of a process: its request as given. */
interface ProcessConfig {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
  tag?: string;
}

/** Shortest and longest pause between looks at a command's log, ms. */
const POLL_MIN_MS = 5;
const POLL_MAX_MS = 50;
/** How often a stream looks at whether its sandbox still runs, ms. */
const STATE_CHECK_MS = 500;

/** Signal numbers of `process.Signal` (proto enum names or numbers). */
const SIGNALS: Record<string, NodeJS.Signals> = {
  SIGNAL_SIGKILL: 'SIGKILL',
  SIGNAL_SIGTERM: 'SIGTERM',
  '9': 'SIGKILL',
  '15': 'SIGTERM',
};

export class EnvdProcessAdapter {
  /** Configs of processes started through envd, for `List`. Key: `sandboxId/commandId`. */
  private readonly configs = new Map<string, ProcessConfig>();

  constructor(private readonly services: Services) {}

  /**
   * `Start`: run the process as a background command and stream its events until it ends or the client goes.
   * @param timeoutMs kills the process when it elapses (the client's `Connect-Timeout-Ms`); null: no limit
   */
  async start(ctx: EnvdContext, request: StartRequest, stream: ServerStream, timeoutMs: number | null): Promise<void> {
    const { process: proc, pty } = request;
    const argv = [proc.cmd, ...proc.args];
    // Without `stdin: true` the process reads end of file at once, as under E2B's envd.
    const wantsStdin = request.stdin === true || pty !== undefined;
    const info = await this.services.commands.start(ctx.caller, ctx.sandboxId, {
      cmd: wantsStdin ? argv : ['/bin/sh', '-c', 'exec "$@" </dev/null', 'sh', ...argv],
      env: proc.envs,
      cwd: proc.cwd ?? ctx.cwd,
      user: ctx.user,
      ...(timeoutMs === null ? {} : { timeoutMs }),
      ...(pty === undefined
        ? {}
        : { pty: { cols: pty.size.cols, rows: pty.size.rows, term: proc.envs.TERM ?? 'xterm-256color' } }),
    });
    this.configs.set(`${ctx.sandboxId}/${info.commandId}`, {
      cmd: proc.cmd,
      args: proc.args,
      envs: proc.envs,
      ...(proc.cwd === undefined ? {} : { cwd: proc.cwd }),
      ...(request.tag === undefined ? {} : { tag: request.tag }),
    });
    await stream.send({ event: { start: { pid: info.pid } } });
    await this.follow(ctx, info, 0, stream);
  }

  /** `Connect`: stream a running process's output from now on, then its end. @throws ConnectError not_found */
  async connect(ctx: EnvdContext, selector: Selector, stream: ServerStream): Promise<void> {
    const info = await this.find(ctx, selector);
    await stream.send({ event: { start: { pid: info.pid } } });
    await this.follow(ctx, info, info.endOffset, stream);
  }

  /** `List`: the running processes. */
  async list(ctx: EnvdContext): Promise<unknown> {
    const infos = await this.services.commands.list(ctx.caller, ctx.sandboxId);
    return {
      processes: infos
        .filter((info) => info.status === 'running')
        .map((info) => {
          const config = this.configs.get(`${ctx.sandboxId}/${info.commandId}`);
          const { tag, ...rest } = config ?? { cmd: info.argv[0] ?? '', args: info.argv.slice(1), envs: {} };
          return { pid: info.pid, config: rest, ...(tag === undefined ? {} : { tag }) };
        }),
    };
  }

  /** `SendInput`: stdin or PTY bytes. @throws ConnectError not_found */
  async sendInput(ctx: EnvdContext, request: z.infer<typeof E2bProcessRequests.SendInput>): Promise<void> {
    const info = await this.find(ctx, request.process);
    const data = request.input.pty ?? request.input.stdin ?? '';
    await this.services.commands.control(
      ctx.caller,
      ctx.sandboxId,
      info.commandId,
      ControlKind.stdin,
      Buffer.from(data, 'base64'),
    );
  }

  /** `CloseStdin`. @throws ConnectError not_found */
  async closeStdin(ctx: EnvdContext, selector: Selector): Promise<void> {
    const info = await this.find(ctx, selector);
    await this.services.commands.control(
      ctx.caller,
      ctx.sandboxId,
      info.commandId,
      ControlKind.stdinClose,
      Buffer.alloc(0),
    );
  }

  /** `SendSignal`: SIGKILL or SIGTERM to the process group. @throws ConnectError not_found, invalid_argument */
  async sendSignal(ctx: EnvdContext, request: z.infer<typeof E2bProcessRequests.SendSignal>): Promise<void> {
    const signal = SIGNALS[String(request.signal ?? '')];
    if (signal === undefined)
      throw new ConnectError('invalid_argument', 'signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM');
    const info = await this.find(ctx, request.process);
    await this.services.commands.kill(ctx.caller, ctx.sandboxId, info.commandId, signal);
  }

  /** `Update`: resize a PTY. @throws ConnectError not_found */
  async update(ctx: EnvdContext, request: z.infer<typeof E2bProcessRequests.Update>): Promise<void> {
    const info = await this.find(ctx, request.process);
    if (request.pty === undefined) return;
    await this.services.commands.control(
      ctx.caller,
      ctx.sandboxId,
      info.commandId,
      ControlKind.resize,
      resizePayload(request.pty.size),
    );
  }

  private isRunning(ctx: EnvdContext): Promise<boolean> {
    return this.services.sandboxes
      .require(ctx.caller.tenantId, ctx.sandboxId)
      .then((r) => r.state === 'running')
      .catch(() => false);
  }

  /** The running command a selector names. @throws ConnectError not_found */
  private async find(ctx: EnvdContext, selector: Selector): Promise<CommandInfo> {
    const infos = await this.services.commands.list(ctx.caller, ctx.sandboxId);
    const running = infos.filter((info) => info.status === 'running');
    const match =
      selector.pid !== undefined
        ? running.find((info) => info.pid === selector.pid)
        : running.find((info) => this.configs.get(`${ctx.sandboxId}/${info.commandId}`)?.tag === selector.tag);
    if (match === undefined) {
      throw new ConnectError(
        'not_found',
        selector.pid !== undefined
          ? `process with pid ${selector.pid} not found`
          : `process with tag ${selector.tag} not found`,
      );
    }
    return match;
  }

  /**
   * Stream a command's output from `offset`, then its end event. A sandbox that stops running under the stream
   * drops the connection without an end (E2B's clients then report the sandbox gone); a client that leaves ends
   * the loop, never the process.
   */
  private async follow(ctx: EnvdContext, info: CommandInfo, offset: number, stream: ServerStream): Promise<void> {
    const key = `${ctx.sandboxId}/${info.commandId}`;
    let fs: SandboxFs;
    try {
      fs = (await this.services.commands.view(ctx.caller, ctx.sandboxId)).fs;
    } catch {
      stream.drop();
      return;
    }
    const cursor = new LogCursor(fs, `${commandDir(info.commandId)}/log`, offset);
    let idleMs = POLL_MIN_MS;
    let checkedAtMs = Date.now();
    try {
      while (stream.isOpen) {
        // The exit file is written after the last output, so output read after seeing it is complete.
        const exit = await readExit(fs, info.commandId);
        let read = await cursor.next();
        while (read.chunks.length > 0 && stream.isOpen) {
          for (const chunk of read.chunks) {
            const channel = info.pty ? 'pty' : chunk.channel === 2 ? 'stderr' : 'stdout';
            await stream.send({ event: { data: { [channel]: chunk.data.toString('base64') } } });
          }
          idleMs = POLL_MIN_MS;
          read = await cursor.next();
        }
        if (exit !== null) {
          this.services.commands.releaseControl(ctx.sandboxId, info.commandId);
          this.configs.delete(key);
          const signalled = exit.exitCode === null;
          await stream.send({
            event: {
              end: {
                exitCode: signalled ? -1 : exit.exitCode,
                exited: !signalled,
                status: signalled ? `signal: ${signalText(exit.signal)}` : `exit status ${exit.exitCode}`,
                ...(exit.timedOut ? { error: 'context deadline exceeded' } : {}),
              },
            },
          });
          stream.end();
          return;
        }
        if (Date.now() - checkedAtMs > STATE_CHECK_MS) {
          checkedAtMs = Date.now();
          if (!(await this.isRunning(ctx))) throw new Error('the sandbox stopped running');
        }
        await sleep(idleMs);
        idleMs = Math.min(POLL_MAX_MS, idleMs * 2);
      }
    } catch {
      // The sandbox's files went away under the stream: it was deleted, paused or stopped.
      if (await this.isRunning(ctx))
        stream.end(new ConnectError('internal', 'reading the process output failed; reconnect'));
      else stream.drop();
    }
  }
}

function signalText(signal: string | null): string {
  if (signal === 'SIGKILL') return 'killed';
  if (signal === 'SIGTERM') return 'terminated';
  return signal ?? 'unknown';
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
