import { createHash } from 'node:crypto';
import { constants as osConstants } from 'node:os';
import type { CommandInfo } from '@burrow/contract';
import { ErrorCode } from '@burrow/contract';
import { FsError, type RuntimeDriver, RuntimeError, SandboxFs, type SandboxProcess } from '@burrow/runtime';
import type { Logger } from 'pino';
import type { SandboxRecord } from '../store/sandbox-store.js';
import { ApiError } from '../util/api-error.js';
import type { Clock } from '../util/clock.js';
import { newId } from '../util/ids.js';
import type { KeyedMutex } from '../util/keyed-mutex.js';
import { toArgv } from './command-argv.js';
import {
  commandDir,
  commandNotFound,
  type ExitFile,
  ExitFileSchema,
  exitFields,
  readBytes,
  readJson,
  type SpecFile,
  SpecFileSchema,
  type StateFile,
  StateFileSchema,
  toInfo,
} from './command-files.js';
import { logBounds } from './command-log-reader.js';
import { mapFsError } from './file-service.js';
import type { Principal } from './key-service.js';
import type { SandboxService } from './sandbox-service.js';
import {
  COMMANDS_DIR,
  LOG_MAX_SEGMENTS,
  LOG_SEGMENT_BYTES,
  SUPERVISOR_PATH,
  SUPERVISOR_SCRIPT,
} from './supervisor-script.js';
import { resolveUser } from './user-lookup.js';

/** A background command request after contract defaults are applied. */
export interface StartCommandInput {
  cmd: string | string[];
  env: Record<string, string>;
  cwd?: string | undefined;
  user?: string | undefined;
  timeoutMs?: number | undefined;
  pty?: { cols: number; rows: number; term: string } | undefined;
}

/** Control record kinds of the supervisor's `ctl` FIFO. */
export const ControlKind = { stdin: 0, stdinClose: 1, resize: 2, signal: 3 } as const;

/** Exited commands a sandbox keeps (with their logs); older ones are removed when a new one starts. */
const KEEP_EXITED_COMMANDS = 64;
/** Exited commands beyond {@link KEEP_EXITED_COMMANDS} that make a prune worth its exec. */
const PRUNE_BATCH = 16;
/**
 * How long the server answers for a command it just started from what the start told it, in ms: the agent's
 * supervisor answers before it writes the command's files (each a gofer round trip inside the sandbox).
 */
const RECENT_START_MS = 30_000;
/** How often {@link CommandService.wait} looks for the exit file, ms. */
const WAIT_POLL_MS = 20;
/** PATH of the supervisor's own process. */
const SUPERVISOR_ENV = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' };
const SUPERVISOR_SHA = createHash('sha256').update(SUPERVISOR_SCRIPT).digest('hex');

/** A running sandbox's file view, for the routes that read a command's files. */
export interface CommandView {
  sandbox: SandboxRecord;
  fs: SandboxFs;
}

/**
 * Background commands: each runs under an in-sandbox supervisor that keeps its output in a bounded ring of log
 * segments and its state in files in the sandbox's own filesystem (`/.burrow/commands/<id>/`, on the sandbox's
 * disk under its data dir). So the registry and the output survive a server restart and a pause/resume, and go
 * away with the sandbox. The server only reads those files (through {@link SandboxFs}) and starts helper execs.
 */
export class CommandService {
  /** One `ctl` writer per command, shared by every client that sends input. Key: `sandboxId/commandId`. */
  private readonly controls = new Map<string, Promise<SandboxProcess>>();
  /** Commands started in the last {@link RECENT_START_MS}, until their files are there. Key: `sandboxId/commandId`. */
  private readonly recentStarts = new Map<string, { spec: SpecFile; state: StateFile; untilMs: number }>();

  constructor(
    private readonly deps: {
      sandboxes: SandboxService;
      driver: RuntimeDriver;
      mutex: KeyedMutex;
      clock: Clock;
      logger: Logger;
    },
  ) {}

  /**
   * The file view of a running sandbox.
   * @throws ApiError `sandbox_not_found`, `sandbox_not_running`
   */
  async view(caller: Principal, id: string): Promise<CommandView> {
    return this.deps.mutex.run(id, async () => {
      const sandbox = await this.deps.sandboxes.requireRunning(caller.tenantId, id);
      if (sandbox.state !== 'running') {
        throw new ApiError(ErrorCode.sandboxNotRunning, `sandbox ${id} is ${sandbox.state}, not running`, {
          hint:
            sandbox.state === 'error'
              ? 'start it again (its disk and files are kept) or delete it'
              : 'resume or start it, then retry',
        });
      }
      return { sandbox, fs: new SandboxFs(this.deps.driver.rootDir(id)) };
    });
  }

  /**
   * Start a background command; resolves once it runs (its pid is known).
   * @throws ApiError `sandbox_not_found`, `sandbox_not_running`, `user_not_found`, `runtime_error` (no python3 in
   *   the sandbox, or the supervisor could not start)
   */
  async start(caller: Principal, id: string, input: StartCommandInput): Promise<CommandInfo> {
    const { sandbox, fs } = await this.view(caller, id);
    const commandId = newId('cmd');
    const dir = commandDir(commandId);
    const user = input.user === undefined ? undefined : await resolveUser(fs, input.user);
    const env: Record<string, string> = {
      ...sandbox.env,
      ...(user === undefined ? {} : { HOME: user.home, USER: user.name, LOGNAME: user.name }),
      ...(input.pty === undefined ? {} : { TERM: input.pty.term }),
      ...input.env,
    };
    const argv = toArgv(input.cmd);
    const cwd = input.cwd ?? sandbox.cwd;
    // The agent's supervisor writes every file of the command itself inside the sandbox, so this path costs no host
    // file operation (each is several thread-pool hops); without an agent (or with an old one) python3's starts.
    const fast = await this.deps.driver
      .startSupervised?.(id, {
        dir,
        argv,
        env,
        cwd,
        user: user === undefined ? undefined : { uid: user.uid, gid: user.gid },
        timeoutMs: input.timeoutMs,
        pty: input.pty === undefined ? undefined : { cols: input.pty.cols, rows: input.pty.rows },
        segmentBytes: LOG_SEGMENT_BYTES,
        maxSegments: LOG_MAX_SEGMENTS,
      })
      .catch((error: unknown) => {
        throw new ApiError(
          ErrorCode.runtimeError,
          `the command supervisor did not start: ${(error as Error).message}`,
          {
            hint: 'check that the sandbox runs',
            cause: error,
          },
        );
      });
    if (fast !== null && fast !== undefined) {
      this.deps.logger.debug({ sandboxId: id, commandId }, 'background command started');
      this.rememberStart(id, commandId, {
        spec: {
          argv,
          pty: input.pty === undefined ? null : { cols: input.pty.cols, rows: input.pty.rows },
          createdAtMs: fast.startedAtMs,
        },
        state: { pid: fast.pid, startedAtMs: fast.startedAtMs, supervisorPid: fast.supervisorPid },
      });
      // Pruning reads exit files: after the answer, never on the start's path.
      void this.pruneExited(id, fs).catch(() => undefined);
      return toInfo(
        id,
        commandId,
        {
          argv,
          pty: input.pty === undefined ? null : { cols: input.pty.cols, rows: input.pty.rows },
          createdAtMs: fast.startedAtMs,
        },
        { pid: fast.pid, startedAtMs: fast.startedAtMs, supervisorPid: fast.supervisorPid },
        null,
        { firstOffset: 0, endOffset: 0 },
      );
    }
    try {
      await this.pruneExited(id, fs);
      const spec = {
        argv,
        env,
        cwd,
        user: user === undefined ? null : { name: user.name, uid: user.uid, gid: user.gid },
        timeoutMs: input.timeoutMs ?? null,
        pty: input.pty === undefined ? null : { cols: input.pty.cols, rows: input.pty.rows },
        segmentBytes: LOG_SEGMENT_BYTES,
        maxSegments: LOG_MAX_SEGMENTS,
        createdAtMs: this.deps.clock.nowMs(),
      };
      await fs.write(`${dir}/spec.json`, Buffer.from(JSON.stringify(spec)), { mode: 0o600 });
    } catch (error) {
      throw mapFsError(error);
    }
    await this.startWithPython(id, fs, dir);
    this.deps.logger.debug({ sandboxId: id, commandId }, 'background command started');
    return this.info(fs, id, commandId);
  }

  /**
   * Every background command of the sandbox, oldest first, with exited ones it still keeps.
   * @throws ApiError `sandbox_not_found`, `sandbox_not_running`
   */
  async list(caller: Principal, id: string): Promise<CommandInfo[]> {
    const { fs } = await this.view(caller, id);
    const entries = await fs.list(COMMANDS_DIR).catch((error: unknown) => {
      if (error instanceof FsError && error.code === 'file_not_found') return [];
      throw mapFsError(error);
    });
    const ids = entries
      .filter((e) => e.type === 'directory')
      .map((e) => e.path.slice(e.path.lastIndexOf('/') + 1))
      .filter((name) => /^cmd_[0-9a-z]{20}$/.test(name));
    for (const key of this.recentStarts.keys()) {
      const [sandboxId, commandId] = key.split('/');
      if (sandboxId === id && commandId !== undefined && !ids.includes(commandId)) ids.push(commandId);
    }
    const infos: CommandInfo[] = [];
    for (const commandId of ids) {
      const info = await this.info(fs, id, commandId).catch(() => null);
      if (info !== null) infos.push(info);
    }
    await this.markLost(id, fs, infos);
    return infos.sort((a, b) => a.startedAt.localeCompare(b.startedAt) || a.commandId.localeCompare(b.commandId));
  }

  /**
   * One command.
   * @throws ApiError `sandbox_not_found`, `sandbox_not_running`, `command_not_found`
   */
  async get(caller: Principal, id: string, commandId: string): Promise<CommandInfo> {
    const { fs } = await this.view(caller, id);
    const info = await this.info(fs, id, commandId);
    await this.markLost(id, fs, [info]);
    return info;
  }

  /**
   * Wait up to `timeoutMs` for the command to end; answers with its info either way (`status` tells).
   * @throws ApiError as {@link get}
   */
  async wait(
    caller: Principal,
    id: string,
    commandId: string,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<CommandInfo> {
    const { fs } = await this.view(caller, id);
    const deadline = this.deps.clock.nowMs() + timeoutMs;
    let info = await this.info(fs, id, commandId);
    await this.markLost(id, fs, [info]);
    while (info.status === 'running' && this.deps.clock.nowMs() < deadline && !signal?.aborted) {
      await new Promise((resolve) => setTimeout(resolve, WAIT_POLL_MS));
      const exit = await readJson(fs, `${commandDir(commandId)}/exit.json`, ExitFileSchema).catch(() => null);
      if (exit !== null) info = await this.info(fs, id, commandId);
    }
    return info;
  }

  /**
   * Send `signal` to every process of the command's tree (its supervisor's descendants, orphans it adopted included; a python3 supervisor signals the process group). No-op once it ended.
   * @throws ApiError as {@link get}
   */
  async kill(caller: Principal, id: string, commandId: string, signal: NodeJS.Signals): Promise<CommandInfo> {
    const { fs } = await this.view(caller, id);
    const info = await this.info(fs, id, commandId);
    if (info.status !== 'running') return info;
    const number = osConstants.signals[signal];
    await this.control(caller, id, commandId, ControlKind.signal, Buffer.from([number])).catch((error: unknown) => {
      // It ended meanwhile: nothing to signal.
      if (!(error instanceof ApiError && error.code === ErrorCode.conflict)) throw error;
    });
    return this.info(fs, id, commandId);
  }

  /**
   * Send a control record (stdin bytes, stdin close, PTY resize) to a running command's supervisor.
   * @throws ApiError as {@link get}; `conflict` when the command already ended
   */
  async control(caller: Principal, id: string, commandId: string, kind: number, payload: Buffer): Promise<void> {
    const { fs } = await this.view(caller, id);
    const info = await this.info(fs, id, commandId);
    if (info.status !== 'running') {
      throw new ApiError(ErrorCode.conflict, `command ${commandId} is ${info.status}`, {
        hint: 'input goes only to a running command',
      });
    }
    const writer = await this.controlWriter(id, commandId);
    for (let at = 0; at === 0 || at < payload.length; at += 65_536) {
      const body = payload.subarray(at, at + 65_536);
      const header = Buffer.alloc(5);
      header.writeUInt8(kind, 0);
      header.writeUInt32BE(body.length, 1);
      if (!writer.stdin.write(Buffer.concat([header, body]))) {
        await new Promise((resolve) => writer.stdin.once('drain', resolve));
      }
    }
  }

  /** Info of one command from its files. @throws ApiError `command_not_found` */
  async info(fs: SandboxFs, sandboxId: string, commandId: string): Promise<CommandInfo> {
    const dir = commandDir(commandId);
    const recent = this.recentStart(sandboxId, commandId);
    const spec = (await readJson(fs, `${dir}/spec.json`, SpecFileSchema).catch(() => null)) ?? recent?.spec ?? null;
    if (spec === null) throw commandNotFound(commandId);
    const state: StateFile | null =
      (await readJson(fs, `${dir}/state.json`, StateFileSchema).catch(() => null)) ?? recent?.state ?? null;
    const exit: ExitFile | null = await readJson(fs, `${dir}/exit.json`, ExitFileSchema).catch(() => null);
    const bounds = await logBounds(fs, `${dir}/log`).catch(() => ({ firstOffset: 0, endOffset: 0 }));
    return toInfo(sandboxId, commandId, spec, state, exit, bounds);
  }

  private rememberStart(sandboxId: string, commandId: string, start: { spec: SpecFile; state: StateFile }): void {
    const nowMs = this.deps.clock.nowMs();
    for (const [key, entry] of this.recentStarts) if (entry.untilMs <= nowMs) this.recentStarts.delete(key);
    this.recentStarts.set(`${sandboxId}/${commandId}`, { ...start, untilMs: nowMs + RECENT_START_MS });
  }

  private recentStart(sandboxId: string, commandId: string): { spec: SpecFile; state: StateFile } | undefined {
    const entry = this.recentStarts.get(`${sandboxId}/${commandId}`);
    return entry !== undefined && entry.untilMs > this.deps.clock.nowMs() ? entry : undefined;
  }

  /** Close the input writers of commands that ended (called by attach streams when they see the exit). */
  releaseControl(sandboxId: string, commandId: string): void {
    const key = `${sandboxId}/${commandId}`;
    const writer = this.controls.get(key);
    this.controls.delete(key);
    void writer?.then((p) => p.stdin.end()).catch(() => undefined);
  }

  private controlWriter(sandboxId: string, commandId: string): Promise<SandboxProcess> {
    const key = `${sandboxId}/${commandId}`;
    let writer = this.controls.get(key);
    if (writer === undefined) {
      // One writer per command, so records of several clients never interleave inside the FIFO.
      writer = this.deps.driver.exec(sandboxId, {
        // The agent's supervisor makes its FIFO just after the start answered: wait for it (never create a file).
        argv: [
          '/bin/sh',
          '-c',
          'i=0; while [ ! -p "$1" ] && [ $i -lt 500 ]; do i=$((i+1)); sleep 0.01; done; exec cat > "$1"',
          'ctl',
          `${commandDir(commandId)}/ctl`,
        ],
        env: SUPERVISOR_ENV,
        cwd: '/',
      });
      this.controls.set(key, writer);
      writer.then(
        (p) => {
          p.stdout.resume();
          p.stderr.resume();
          p.stdin.on('error', () => undefined);
          void p.exited.finally(() => {
            if (this.controls.get(key) === writer) this.controls.delete(key);
          });
        },
        () => this.controls.delete(key),
      );
    }
    return writer;
  }

  /** Commands without an exit file whose supervisor is gone (a stop/start ended them) become `lost`. */
  private async markLost(sandboxId: string, fs: SandboxFs, infos: CommandInfo[]): Promise<void> {
    const open = infos.filter((i) => i.status === 'running');
    if (open.length === 0) return;
    const checks: string[] = [];
    for (const info of open) {
      const state = await readJson(fs, `${commandDir(info.commandId)}/state.json`, StateFileSchema).catch(() => null);
      if (state?.supervisorPid === undefined) continue;
      checks.push(`grep -qas ${info.commandId} /proc/${state.supervisorPid}/cmdline && echo ${info.commandId}`);
    }
    if (checks.length === 0) return;
    const result = await this.helperExec(sandboxId, ['/bin/sh', '-c', `${checks.join('; ')}; true`]);
    if (result.exitCode !== 0) return;
    const alive = new Set(result.stdout.split('\n'));
    for (const info of open) {
      if (alive.has(info.commandId)) continue;
      // The exit file may have appeared since it was read.
      const exit = await readJson(fs, `${commandDir(info.commandId)}/exit.json`, ExitFileSchema).catch(() => null);
      if (exit !== null) Object.assign(info, { status: 'exited', ...exitFields(exit) });
      else info.status = 'lost';
    }
  }

  /** Start the command with the python3 supervisor (no agent, or one too old for background starts). */
  private async startWithPython(sandboxId: string, fs: SandboxFs, dir: string): Promise<void> {
    try {
      await this.installSupervisor(fs);
    } catch (error) {
      throw mapFsError(error);
    }
    const launcher = await this.launchSupervisor(sandboxId, fs, dir);
    if (launcher.exitCode !== 0) {
      const noPython = launcher.exitCode === 127;
      throw new ApiError(
        ErrorCode.runtimeError,
        noPython
          ? 'background commands need python3 in the sandbox, and it has none'
          : `the command supervisor did not start: ${launcher.stderr.slice(0, 500)}`,
        { hint: noPython ? 'use a template with python3 (the base template has it)' : 'check the sandbox runs' },
      );
    }
  }

  private async installSupervisor(fs: SandboxFs): Promise<void> {
    const current = await readBytes(fs, SUPERVISOR_PATH).catch(() => null);
    if (current !== null && createHash('sha256').update(current).digest('hex') === SUPERVISOR_SHA) return;
    await fs.write(SUPERVISOR_PATH, Buffer.from(SUPERVISOR_SCRIPT), { mode: 0o755 });
  }

  /** Remove the oldest exited commands beyond {@link KEEP_EXITED_COMMANDS}. */
  private async pruneExited(sandboxId: string, fs: SandboxFs): Promise<void> {
    const entries = await fs.list(COMMANDS_DIR).catch(() => []);
    // Reading every exit file costs a file read per command: only once a batch of extra ones piled up.
    if (entries.length < KEEP_EXITED_COMMANDS + PRUNE_BATCH) return;
    const exited: Array<{ path: string; endedAtMs: number }> = [];
    for (const entry of entries) {
      if (entry.type !== 'directory') continue;
      const exit = await readJson(fs, `${entry.path}/exit.json`, ExitFileSchema).catch(() => null);
      if (exit !== null) exited.push({ path: entry.path, endedAtMs: exit.endedAtMs });
    }
    exited.sort((a, b) => a.endedAtMs - b.endedAtMs);
    const old = exited.slice(0, Math.max(0, exited.length - KEEP_EXITED_COMMANDS + 1)).map((entry) => entry.path);
    // Removed inside the sandbox, through gVisor: files the sandbox made and the host removed behind its back make
    // the next restore of a pause image fail ("restoring container: no such file or directory").
    if (old.length > 0) await this.helperExec(sandboxId, ['rm', '-rf', '--', ...old]);
  }

  /**
   * Start the supervisor from the sandbox's init (`driver.spawn`), not from an exec: gVisor ends every process
   * descended from an exec when it restores a checkpoint, and background commands must survive pause, resume and
   * fork with their pids (docs/adr/0002). Waits for its state or exit file like `supervisor.py start` does.
   */
  private async launchSupervisor(
    sandboxId: string,
    fs: SandboxFs,
    dir: string,
  ): Promise<{ exitCode: number | null; stdout: string; stderr: string }> {
    try {
      await this.deps.driver.spawn(sandboxId, {
        argv: ['python3', SUPERVISOR_PATH, 'start', dir],
        env: SUPERVISOR_ENV,
        cwd: '/',
      });
    } catch (error) {
      if (error instanceof RuntimeError && error.code === ErrorCode.conflict) {
        throw new ApiError(ErrorCode.conflict, `background commands cannot start: ${error.message}`, {
          hint: 'stop and start the sandbox (burrow sandbox stop ID, then start ID; its files are kept) to restore it',
          cause: error,
        });
      }
      throw new ApiError(ErrorCode.runtimeError, `could not start the supervisor: ${(error as Error).message}`, {
        hint: 'check that the sandbox runs',
        cause: error,
      });
    }
    const deadline = Date.now() + 30_000;
    let probed = false;
    while (Date.now() < deadline) {
      if (await fs.exists(`${dir}/state.json`).catch(() => false)) return { exitCode: 0, stdout: '', stderr: '' };
      if (await fs.exists(`${dir}/exit.json`).catch(() => false)) {
        // A quick command can start and end between the two checks: state.json is always written first, so with
        // it present the command ran (exit.json is its end); without it the supervisor failed to start it.
        if (await fs.exists(`${dir}/state.json`).catch(() => false)) return { exitCode: 0, stdout: '', stderr: '' };
        const failed = await readJson(fs, `${dir}/exit.json`, ExitFileSchema).catch(() => null);
        return { exitCode: 1, stdout: '', stderr: JSON.stringify(failed) };
      }
      if (!probed && Date.now() > deadline - 29_000) {
        // After a second without a sign of life, tell a missing python3 apart from a slow start.
        probed = true;
        const probe = await this.helperExec(sandboxId, ['python3', '-c', '']);
        if (probe.exitCode === 127) return probe;
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    return { exitCode: 1, stdout: '', stderr: 'supervisor did not start within 30 s' };
  }

  /** Run a short helper in the sandbox and collect its output. */
  private async helperExec(
    sandboxId: string,
    argv: string[],
  ): Promise<{ exitCode: number | null; stdout: string; stderr: string }> {
    try {
      const proc = await this.deps.driver.exec(sandboxId, { argv, env: SUPERVISOR_ENV, cwd: '/' });
      proc.stdin.end();
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      proc.stdout.on('data', (c: Buffer) => out.push(c));
      proc.stderr.on('data', (c: Buffer) => err.push(c));
      const exit = await proc.exited;
      return {
        exitCode: exit.exitCode,
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
      };
    } catch (error) {
      throw new ApiError(
        ErrorCode.runtimeError,
        `could not run a helper in sandbox ${sandboxId}: ${(error as Error).message}`,
        {
          hint: 'check that the sandbox runs',
          cause: error,
        },
      );
    }
  }
}

export { commandDir, readExit } from './command-files.js';
