import type { IncomingMessage } from 'node:http';
import type { CommandClientFrame, CommandInfo } from '@burrow/contract';
import type WebSocket from 'ws';
import { CommandInfoParser, CommandServerFrameParser, ExecChannel, INVALID } from './contract-wire.js';
import { AbortedError, type BurrowError, ClientErrorCode, errorFromWire, ProtocolError } from './errors.js';
import type { ExecSignal } from './exec-stream.js';
import { connectionError, errorFromBody, type HttpClient } from './http-client.js';
import { webSocketClass } from './ws-loader.js';

/**
 * One frame of an attached command: output with the offset just after it (pass it to `connect` to resume there),
 * `end` (only with `follow: false`: everything written so far was sent) or the exit, which is always last.
 */
export type CommandEvent =
  | { type: 'stdout'; data: Uint8Array; offset: number }
  | { type: 'stderr'; data: Uint8Array; offset: number }
  | { type: 'end'; offset: number }
  | { type: 'exit'; exitCode: number | null; signal: string | null; timedOut: boolean; offset: number };

/** Options of {@link CommandHandle.output}. */
export interface AttachOptions {
  /** Output offset to start from. Bytes the ring already dropped are skipped (see `droppedBytes`). @default 0 */
  offset?: number | undefined;
  /** Keep streaming until the command exits; false ends with an `end` event after what was written so far. @default true */
  follow?: boolean | undefined;
  /** Aborting it closes the stream (the command keeps running); iteration then throws `AbortedError`. */
  signal?: AbortSignal | undefined;
}

/**
 * A background command in a sandbox (`commands.run(cmd, { background: true })`, `commands.connect(id)`,
 * `pty.create()`). The command runs independently of this handle and of the connection: closing a stream or
 * losing the client never stops it.
 *
 * @example
 * ```ts
 * const server = await sandbox.commands.run('python3 -m http.server 8000', { background: true });
 * for await (const event of server) if (event.type === 'stdout') process.stdout.write(event.data);
 * await server.kill();
 * ```
 */
export class CommandHandle implements AsyncIterable<CommandEvent> {
  readonly #http: HttpClient;
  readonly #base: string;
  readonly #offset: number;
  /** Command id (`cmd_…`). */
  readonly commandId: string;
  /** Process id inside the sandbox (also its process group id). */
  readonly pid: number;
  /** Sandbox id. */
  readonly sandboxId: string;

  /** @internal Use `sandbox.commands`. */
  constructor(http: HttpClient, info: CommandInfo, offset = 0) {
    this.#http = http;
    this.commandId = info.commandId;
    this.pid = info.pid;
    this.sandboxId = info.sandboxId;
    this.#base = `/sandboxes/${encodeURIComponent(info.sandboxId)}/commands/${encodeURIComponent(info.commandId)}`;
    this.#offset = offset;
  }

  /** The command's current info. @throws `CommandNotFoundError`, `SandboxNotRunningError`, `ConnectionError` */
  info(): Promise<CommandInfo> {
    return this.#http.json(CommandInfoParser, 'GET', this.#base);
  }

  /**
   * Waits for the command to end (polling the server's long wait).
   * @param options.timeoutMs give up after this many ms and return the info with `status: 'running'`. @default no limit
   * @returns its info, with `exitCode`/`signal` and `timedOut` (true when its own `timeoutMs` killed it).
   */
  async wait(options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<CommandInfo> {
    const deadline = options.timeoutMs === undefined ? Number.POSITIVE_INFINITY : Date.now() + options.timeoutMs;
    while (true) {
      const left = Math.max(0, Math.min(deadline - Date.now(), 30_000));
      const info = await this.#http.json(CommandInfoParser, 'GET', `${this.#base}/wait`, {
        query: { timeoutMs: Math.round(left) },
        signal: options.signal,
      });
      if (info.status !== 'running' || Date.now() >= deadline) return info;
    }
  }

  /**
   * Sends a signal to the command's whole process group.
   * @param signal @default 'SIGKILL'
   */
  kill(signal: ExecSignal = 'SIGKILL'): Promise<CommandInfo> {
    return this.#http.json(CommandInfoParser, 'POST', `${this.#base}/kill`, { json: { signal } });
  }

  /** Writes bytes (or UTF-8 text) to the command's stdin (a PTY's input). @throws `ConflictError` once it ended */
  async sendStdin(data: string | Uint8Array): Promise<void> {
    const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : Buffer.from(data);
    await this.#http.empty('POST', `${this.#base}/stdin`, { json: { data: bytes.toString('base64') } });
  }

  /** Closes stdin (on a PTY: sends end-of-file, ^D). */
  async closeStdin(): Promise<void> {
    await this.#http.empty('POST', `${this.#base}/stdin`, { json: { close: true } });
  }

  /** Resizes the command's PTY; the program gets SIGWINCH. */
  async resize(size: { cols: number; rows: number }): Promise<void> {
    await this.#http.empty('POST', `${this.#base}/resize`, { json: size });
  }

  /** Streams output from an offset (default: where this handle was connected), then live until the exit. */
  output(options: AttachOptions = {}): AttachStream {
    return new AttachStream(this.#http, this.#base, { offset: this.#offset, ...stripUndefined(options) });
  }

  [Symbol.asyncIterator](): AsyncIterator<CommandEvent> {
    return this.output()[Symbol.asyncIterator]();
  }
}

/**
 * An attach WebSocket to a background command: iterate it for {@link CommandEvent}s; send input, signals and PTY
 * resizes while attached. Closing it leaves the command running.
 */
export class AttachStream implements AsyncIterable<CommandEvent> {
  readonly #socket: WebSocket;
  readonly #events: CommandEvent[] = [];
  #offset = 0;
  #open = false;
  readonly #queued: Array<Buffer | string> = [];
  #done = false;
  #failure: BurrowError | undefined;
  #wake: (() => void) | undefined;
  /** Bytes between the requested offset and the first one sent that the ring had already dropped. */
  droppedBytes = 0;

  /** @internal Use {@link CommandHandle.output}. */
  constructor(http: HttpClient, base: string, options: AttachOptions) {
    const url = http.url(`${base}/stream`);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    url.searchParams.set('offset', String(options.offset ?? 0));
    url.searchParams.set('follow', String(options.follow ?? true));
    this.#socket = new (webSocketClass())(url, { headers: http.authHeaders() });
    this.#socket.on('open', () => {
      this.#open = true;
      for (const frame of this.#queued.splice(0)) this.#socket.send(frame);
    });
    this.#socket.on('message', (data, isBinary) => this.#onMessage(toBuffer(data), isBinary));
    this.#socket.on('unexpected-response', (req, res) => {
      void readBody(res).then((text) => {
        this.#fail(errorFromBody(text, res.statusCode ?? 0));
        req.destroy();
      });
    });
    this.#socket.on('error', (err) => this.#fail(connectionError(http.connection.apiUrl, err)));
    this.#socket.on('close', () =>
      this.#fail(
        new ProtocolError('the attach stream closed before the exit', {
          code: ClientErrorCode.protocolError,
          hint: 'connect again from the last offset',
        }),
      ),
    );
    const signal = options.signal;
    if (signal !== undefined) {
      const onAbort = () =>
        this.#fail(
          new AbortedError('the attach stream was aborted', { code: ClientErrorCode.aborted, cause: signal.reason }),
        );
      if (signal.aborted) queueMicrotask(onAbort);
      else signal.addEventListener('abort', onAbort, { once: true });
    }
  }

  /** Writes bytes (or UTF-8 text) to the command's stdin. */
  writeStdin(data: string | Uint8Array): void {
    const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
    const frame = Buffer.allocUnsafe(bytes.byteLength + 1);
    frame[0] = ExecChannel.stdin;
    frame.set(bytes, 1);
    this.#sendFrame(frame);
  }

  /** Closes the command's stdin. */
  closeStdin(): void {
    this.#sendFrame(JSON.stringify({ type: 'stdin_close' } satisfies CommandClientFrame));
  }

  /** Sends a signal to the command's process group. */
  kill(signal: ExecSignal = 'SIGTERM'): void {
    this.#sendFrame(JSON.stringify({ type: 'signal', signal } satisfies CommandClientFrame));
  }

  /** Resizes the command's PTY. */
  resize(size: { cols: number; rows: number }): void {
    this.#sendFrame(JSON.stringify({ type: 'resize', ...size } satisfies CommandClientFrame));
  }

  /** Detaches; the command keeps running. Idempotent. */
  close(): void {
    if (this.#done) return;
    this.#done = true;
    this.#socket.close(1000);
    this.#wakeUp();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<CommandEvent> {
    try {
      while (true) {
        const event = this.#events.shift();
        if (event !== undefined) {
          yield event;
          if (event.type === 'exit' || event.type === 'end') return;
          continue;
        }
        if (this.#failure !== undefined) throw this.#failure;
        if (this.#done) return;
        await new Promise<void>((resolve) => {
          this.#wake = resolve;
        });
      }
    } finally {
      this.close();
    }
  }

  #sendFrame(frame: Buffer | string): void {
    if (this.#open && this.#socket.readyState === this.#socket.OPEN) this.#socket.send(frame);
    else if (!this.#open) this.#queued.push(frame);
  }

  #onMessage(data: Buffer, isBinary: boolean): void {
    if (this.#done) return;
    if (isBinary) {
      const chunk = new Uint8Array(data.buffer, data.byteOffset + 1, data.byteLength - 1);
      this.#offset += chunk.byteLength;
      const type = data[0] === ExecChannel.stderr ? 'stderr' : 'stdout';
      this.#push({ type, data: chunk, offset: this.#offset });
      return;
    }
    let json: unknown;
    try {
      json = JSON.parse(data.toString('utf8'));
    } catch {
      json = undefined;
    }
    const frame = CommandServerFrameParser.parse(json);
    if (frame === INVALID) {
      this.#fail(
        new ProtocolError(`unexpected attach frame: ${data.toString('utf8').slice(0, 200)}`, {
          code: ClientErrorCode.protocolError,
        }),
      );
      return;
    }
    if (frame.type === 'attached') {
      this.#offset = frame.offset;
      this.droppedBytes = frame.droppedBytes;
    } else if (frame.type === 'error') {
      this.#fail(errorFromWire(frame.error, 0));
    } else {
      this.#push(frame);
      this.#done = true;
      this.#socket.close(1000);
    }
  }

  #push(event: CommandEvent): void {
    this.#events.push(event);
    this.#wakeUp();
  }

  #fail(error: BurrowError): void {
    if (this.#done || this.#failure !== undefined) return;
    this.#failure = error;
    this.#socket.terminate();
    this.#wakeUp();
  }

  #wakeUp(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }
}

function stripUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}

function toBuffer(data: WebSocket.RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

function readBody(res: IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    res.on('data', (chunk: Buffer) => chunks.push(chunk));
    res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    res.on('error', () => resolve(Buffer.concat(chunks).toString('utf8')));
  });
}
