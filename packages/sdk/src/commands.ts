import type { CommandInfo, ExecRequest, StartCommandRequest } from '@burrow/contract';
import { CommandHandle } from './command-handle.js';
import {
  CommandExitError,
  type CommandResult,
  CommandTimeoutError,
  concatBytes,
  resultFromWire,
} from './command-result.js';
import { CommandInfoParser, CommandListParser, ExecAnswerParser, ExecResultParser, INVALID } from './contract-wire.js';
import { BurrowError } from './errors.js';
import { type ExecSignal, ExecStream, type ExecTransportKind } from './exec-stream.js';
import type { HttpClient } from './http-client.js';

/** Options of {@link Commands.run}. */
export interface RunCommandOptions {
  /** Added to the sandbox's environment for this command. */
  env?: Record<string, string> | undefined;
  /** Working directory (absolute). @default the sandbox's `cwd` */
  cwd?: string | undefined;
  /** Kill the command after this many ms. @default 60_000 (1 minute); at most 86_400_000 (24 hours) */
  timeoutMs?: number | undefined;
  /** Bytes (or UTF-8 text) for stdin; stdin is closed after them. @default empty */
  stdin?: string | Uint8Array | undefined;
  /** Called with each stdout chunk as it arrives, decoded as UTF-8 (a character split across chunks stays whole). */
  onStdout?: ((chunk: string, bytes: Uint8Array) => void) | undefined;
  /** Called with each stderr chunk as it arrives, decoded as UTF-8 (a character split across chunks stays whole). */
  onStderr?: ((chunk: string, bytes: Uint8Array) => void) | undefined;
  /** Cancels the command; the call then throws `AbortedError`. */
  signal?: AbortSignal | undefined;
  /** Throw {@link CommandExitError} when the command exits non-zero or dies from a signal. @default false */
  check?: boolean | undefined;
  /** User (name or uid) the command runs as. @default root */
  user?: string | undefined;
  /** Run in the background and return a {@link CommandHandle} at once. @default false */
  background?: false | undefined;
}

/** Options of {@link Commands.run} with `background: true`. */
export interface BackgroundCommandOptions {
  background: true;
  /** Added to the sandbox's environment for this command. */
  env?: Record<string, string> | undefined;
  /** Working directory (absolute). @default the sandbox's `cwd` */
  cwd?: string | undefined;
  /** User (name or uid) the command runs as. @default root */
  user?: string | undefined;
  /** Kill its process group after this many ms (`timedOut: true`). @default no limit */
  timeoutMs?: number | undefined;
  /** Run on a pseudo-terminal of this size. @default pipes */
  pty?: { cols?: number; rows?: number; term?: string } | undefined;
}

/** Options of {@link Commands.stream}. */
export interface StreamCommandOptions {
  /** Added to the sandbox's environment for this command. */
  env?: Record<string, string> | undefined;
  /** Working directory (absolute). @default the sandbox's `cwd` */
  cwd?: string | undefined;
  /** Kill the command after this many ms; the exit event then has `timedOut: true`. @default 60_000 (1 minute) */
  timeoutMs?: number | undefined;
  /** Bytes (or UTF-8 text) for stdin, closed after them. Leave unset to write stdin through the stream. */
  stdin?: string | Uint8Array | undefined;
  /** Aborting it closes the stream; iteration then throws `AbortedError`. */
  signal?: AbortSignal | undefined;
  /** User (name or uid) the command runs as. @default root */
  user?: string | undefined;
  /** Kill the command when the stream closes before it exits. @default false (it runs on to its timeout) */
  killOnDisconnect?: boolean | undefined;
  /** How the stream travels (see `ExecStreamOptions.transport`). @default 'http' on Node.js, else 'websocket' */
  transport?: ExecTransportKind | undefined;
}

/**
 * Runs commands in one sandbox: `sandbox.commands`.
 *
 * @example
 * ```ts
 * const result = await sandbox.commands.run(['python3', '-c', 'print(6*7)']);
 * console.log(result.exitCode, result.stdout); // 0 '42\n'
 * ```
 */
export class Commands {
  readonly #http: HttpClient;
  readonly #sandboxId: string;

  /** @internal Use `sandbox.commands`. */
  constructor(http: HttpClient, sandboxId: string) {
    this.#http = http;
    this.#sandboxId = sandboxId;
  }

  /**
   * Runs a command to completion. A string runs with `/bin/sh -c`; an array runs as argv. Without `onStdout` /
   * `onStderr` it makes one HTTP call; with either, it streams over a WebSocket and calls them per chunk.
   *
   * A non-zero exit is data (`result.exitCode`), not an exception, unless `check: true`.
   *
   * @returns the exit status and the output as text and bytes.
   * @throws {@link CommandTimeoutError} when the command runs past `timeoutMs` (its `result` holds the partial output).
   * @throws {@link CommandExitError} when `check` is true and the command exits non-zero or dies from a signal.
   * @throws `SandboxNotFoundError`, `SandboxNotRunningError`, `InvalidRequestError`, `ConnectionError`, `AbortedError`.
   * @example
   * ```ts
   * const { stdout } = await sandbox.commands.run('ls -1 /', { check: true });
   * await sandbox.commands.run(['pip', 'install', 'requests'], { timeoutMs: 300_000, onStdout: (s) => process.stdout.write(s) });
   * ```
   */
  run(cmd: string | string[], options: BackgroundCommandOptions): Promise<CommandHandle>;
  run(cmd: string | string[], options?: RunCommandOptions): Promise<CommandResult>;
  async run(
    cmd: string | string[],
    options: RunCommandOptions | BackgroundCommandOptions = {},
  ): Promise<CommandResult | CommandHandle> {
    if (options.background === true) return this.#start(cmd, options);
    return this.#runToEnd(cmd, options);
  }

  /**
   * Background commands of the sandbox, running and recently exited (kept across pause/resume and server restarts).
   * @example
   * ```ts
   * for (const c of await sandbox.commands.list()) console.log(c.commandId, c.pid, c.status, c.argv.join(' '));
   * ```
   */
  async list(): Promise<CommandInfo[]> {
    const list = await this.#http.json(CommandListParser, 'GET', `${this.#base()}/commands`);
    return list.commands;
  }

  /**
   * A handle on a background command, to wait, kill, send input or read output from `offset` on.
   * @throws `CommandNotFoundError`
   * @example
   * ```ts
   * const handle = await sandbox.commands.connect(commandId, { offset: lastOffset });
   * for await (const event of handle) if (event.type === 'stdout') process.stdout.write(event.data);
   * ```
   */
  async connect(commandId: string, options: { offset?: number } = {}): Promise<CommandHandle> {
    const info = await this.#http.json(
      CommandInfoParser,
      'GET',
      `${this.#base()}/commands/${encodeURIComponent(commandId)}`,
    );
    return new CommandHandle(this.#http, info, options.offset ?? 0);
  }

  /**
   * Sends a signal (default SIGKILL) to every process of a background command's tree.
   * @throws `CommandNotFoundError`
   */
  async kill(commandId: string, signal: ExecSignal = 'SIGKILL'): Promise<CommandInfo> {
    return this.#http.json(
      CommandInfoParser,
      'POST',
      `${this.#base()}/commands/${encodeURIComponent(commandId)}/kill`,
      {
        json: { signal },
      },
    );
  }

  #base(): string {
    return `/sandboxes/${encodeURIComponent(this.#sandboxId)}`;
  }

  async #start(cmd: string | string[], options: BackgroundCommandOptions): Promise<CommandHandle> {
    const request: StartCommandRequest = {
      cmd,
      ...(options.env === undefined ? {} : { env: options.env }),
      ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
      ...(options.user === undefined ? {} : { user: options.user }),
      ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }),
      ...(options.pty === undefined ? {} : { pty: options.pty }),
    };
    const info = await this.#http.json(CommandInfoParser, 'POST', `${this.#base()}/commands`, { json: request });
    return new CommandHandle(this.#http, info);
  }

  async #runToEnd(cmd: string | string[], options: RunCommandOptions): Promise<CommandResult> {
    const streaming = options.onStdout !== undefined || options.onStderr !== undefined;
    const result = streaming ? await this.#runStreaming(cmd, options) : await this.#runOnce(cmd, options);
    if (result.timedOut) throw new CommandTimeoutError(result, options.timeoutMs);
    if (options.check === true && (result.exitCode !== 0 || result.signal !== null)) {
      throw new CommandExitError(result);
    }
    return result;
  }

  /**
   * Starts a command and streams its output as typed frames (over plain HTTP on Node.js, else a WebSocket). Write stdin, close it or send a
   * signal through the returned {@link ExecStream}. A timeout shows as an exit event with `timedOut: true`.
   *
   * @returns the stream; iterating it throws the connection's error (`SandboxNotFoundError`, `ConnectionError`,
   * `AbortedError`, …) if the command cannot run.
   * @example
   * ```ts
   * const controller = new AbortController();
   * for await (const event of sandbox.commands.stream('tail -f /var/log/app.log', { signal: controller.signal })) {
   *   if (event.type === 'stdout') process.stdout.write(event.data);
   * }
   * ```
   */
  stream(cmd: string | string[], options: StreamCommandOptions = {}): ExecStream {
    return new ExecStream(this.#http, this.#sandboxId, execRequest(cmd, options), {
      stdin: options.stdin,
      signal: options.signal,
      killOnDisconnect: options.killOnDisconnect,
      transport: options.transport,
    });
  }

  async #runOnce(cmd: string | string[], options: RunCommandOptions): Promise<CommandResult> {
    const request: ExecRequest = execRequest(cmd, options);
    if (options.stdin !== undefined) {
      const bytes = typeof options.stdin === 'string' ? Buffer.from(options.stdin, 'utf8') : Buffer.from(options.stdin);
      request.stdin = bytes.toString('base64');
    }
    try {
      const wire = await this.#http.json(
        ExecAnswerParser,
        'POST',
        `/sandboxes/${encodeURIComponent(this.#sandboxId)}/exec`,
        {
          json: request,
          signal: options.signal,
        },
      );
      return resultFromWire(wire);
    } catch (err) {
      throw timeoutFromError(err, options.timeoutMs);
    }
  }

  async #runStreaming(cmd: string | string[], options: RunCommandOptions): Promise<CommandResult> {
    const stream = this.stream(cmd, { ...options, stdin: options.stdin ?? new Uint8Array() });
    const stdout = new StreamCollector(options.onStdout);
    const stderr = new StreamCollector(options.onStderr);
    try {
      for await (const event of stream) {
        if (event.type === 'stdout') stdout.add(event.data);
        else if (event.type === 'stderr') stderr.add(event.data);
        else {
          const { type: _type, ...exit } = event;
          return { ...exit, ...stdout.finish('stdout'), ...stderr.finish('stderr'), truncated: false };
        }
      }
    } catch (err) {
      if (err instanceof BurrowError && err.code === 'exec_timeout') {
        const partial: CommandResult = {
          exitCode: null,
          signal: 'SIGKILL',
          timedOut: true,
          reason: null,
          durationMs: options.timeoutMs ?? 0,
          truncated: false,
          ...stdout.finish('stdout'),
          ...stderr.finish('stderr'),
        };
        throw new CommandTimeoutError(partial, options.timeoutMs, { requestId: err.requestId, cause: err });
      }
      throw err;
    }
    throw new BurrowError('the exec stream ended without an exit frame', { code: 'protocol_error' });
  }
}

function execRequest(
  cmd: string | string[],
  options: {
    env?: Record<string, string> | undefined;
    cwd?: string | undefined;
    timeoutMs?: number | undefined;
    user?: string | undefined;
  },
): ExecRequest {
  return {
    cmd,
    ...(options.user === undefined ? {} : { user: options.user }),
    ...(options.env === undefined ? {} : { env: options.env }),
    ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
    ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }),
  };
}

/** A server-side `exec_timeout` error (instead of a result with `timedOut`) still becomes a CommandTimeoutError. */
function timeoutFromError(err: unknown, timeoutMs: number | undefined): unknown {
  if (!(err instanceof BurrowError) || err.code !== 'exec_timeout') return err;
  const parsed = ExecResultParser.parse(err.details);
  const partial: CommandResult =
    parsed !== INVALID
      ? resultFromWire(parsed)
      : {
          exitCode: null,
          signal: 'SIGKILL',
          timedOut: true,
          reason: null,
          durationMs: timeoutMs ?? 0,
          truncated: false,
          stdout: '',
          stderr: '',
          stdoutBytes: new Uint8Array(),
          stderrBytes: new Uint8Array(),
        };
  return new CommandTimeoutError(partial, timeoutMs, { requestId: err.requestId, cause: err });
}

/** Keeps one stream's bytes and feeds its callback text from a streaming decoder. */
class StreamCollector {
  readonly #chunks: Uint8Array[] = [];
  readonly #decoder = new TextDecoder('utf-8');
  readonly #callback: ((chunk: string, bytes: Uint8Array) => void) | undefined;

  constructor(callback: ((chunk: string, bytes: Uint8Array) => void) | undefined) {
    this.#callback = callback;
  }

  add(bytes: Uint8Array): void {
    this.#chunks.push(bytes);
    if (this.#callback !== undefined) this.#callback(this.#decoder.decode(bytes, { stream: true }), bytes);
  }

  finish<K extends 'stdout' | 'stderr'>(name: K): Record<K, string> & Record<`${K}Bytes`, Uint8Array> {
    if (this.#callback !== undefined) {
      const tail = this.#decoder.decode();
      if (tail !== '') this.#callback(tail, new Uint8Array());
    }
    const bytes = concatBytes(this.#chunks);
    return { [name]: new TextDecoder().decode(bytes), [`${name}Bytes`]: bytes } as Record<K, string> &
      Record<`${K}Bytes`, Uint8Array>;
  }
}

/** Options of {@link Pty.create}. */
export interface CreatePtyOptions {
  /** Columns. @default 80 */
  cols?: number | undefined;
  /** Rows. @default 24 */
  rows?: number | undefined;
  /** `TERM`. @default 'xterm-256color' */
  term?: string | undefined;
  /** Program to run. @default ['/bin/bash', '-l'] */
  cmd?: string | string[] | undefined;
  env?: Record<string, string> | undefined;
  cwd?: string | undefined;
  user?: string | undefined;
}

/**
 * Interactive terminals in one sandbox: `sandbox.pty`. A PTY is a background command on a pseudo-terminal:
 * iterate the handle for output, send input and resizes; it survives disconnects until its program exits.
 *
 * @example
 * ```ts
 * const term = await sandbox.pty.create({ cols: 120, rows: 40 });
 * await sandbox.pty.sendInput(term.commandId, 'ls\n');
 * await sandbox.pty.resize(term.commandId, { cols: 100, rows: 30 });
 * ```
 */
export class Pty {
  readonly #commands: Commands;
  readonly #http: HttpClient;
  readonly #sandboxId: string;

  /** @internal Use `sandbox.pty`. */
  constructor(http: HttpClient, sandboxId: string, commands: Commands) {
    this.#http = http;
    this.#sandboxId = sandboxId;
    this.#commands = commands;
  }

  /** Starts a program (a login shell by default) on a new PTY. */
  create(options: CreatePtyOptions = {}): Promise<CommandHandle> {
    const pty = {
      ...(options.cols === undefined ? {} : { cols: options.cols }),
      ...(options.rows === undefined ? {} : { rows: options.rows }),
      ...(options.term === undefined ? {} : { term: options.term }),
    };
    return this.#commands.run(options.cmd ?? ['/bin/bash', '-l'], {
      background: true,
      pty,
      env: options.env,
      cwd: options.cwd,
      user: options.user,
    });
  }

  /** Resizes a PTY; the program gets SIGWINCH. */
  async resize(commandId: string, size: { cols: number; rows: number }): Promise<void> {
    await this.#http.empty(
      'POST',
      `/sandboxes/${encodeURIComponent(this.#sandboxId)}/commands/${encodeURIComponent(commandId)}/resize`,
      {
        json: size,
      },
    );
  }

  /** Sends input (keystrokes) to a PTY. */
  async sendInput(commandId: string, data: string | Uint8Array): Promise<void> {
    const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : Buffer.from(data);
    await this.#http.empty(
      'POST',
      `/sandboxes/${encodeURIComponent(this.#sandboxId)}/commands/${encodeURIComponent(commandId)}/stdin`,
      {
        json: { data: bytes.toString('base64') },
      },
    );
  }
}
