import type { ExecClientFrame, ExecRequest, ExitInfo } from '@burrow/contract';
import { ExecChannel, ExecServerFrameParser, INVALID } from './contract-wire.js';
import { AbortedError, type BurrowError, ClientErrorCode, errorFromWire, ProtocolError } from './errors.js';
import {
  type ExecConnection,
  type ExecConnectionEvents,
  type ExecTransportKind,
  HttpExecConnection,
  WebSocketExecConnection,
} from './exec-connection.js';
import { Reattachment } from './exec-reattach.js';
import type { HttpClient } from './http-client.js';

export type { ExecTransportKind } from './exec-connection.js';

/** A signal that can be sent to a running command. */
export type ExecSignal = Extract<ExecClientFrame, { type: 'signal' }>['signal'];

/**
 * One frame of a streaming command: a chunk of stdout or stderr (raw bytes, as they arrived), or the exit,
 * which is always last.
 */
export type ExecEvent =
  | { type: 'stdout'; data: Uint8Array }
  | { type: 'stderr'; data: Uint8Array }
  | ({ type: 'exit' } & ExitInfo);

/** Options of {@link ExecStream}, beyond the {@link ExecRequest}. */
export interface ExecStreamOptions {
  /** Bytes (or UTF-8 text) for stdin; stdin is closed after them. Leave unset to write stdin yourself. */
  stdin?: string | Uint8Array | undefined;
  /** Aborting it closes the stream; iteration then throws {@link AbortedError}. */
  signal?: AbortSignal | undefined;
  /** Kill the command when the stream closes before it exits. @default false (it runs on to its timeout) */
  killOnDisconnect?: boolean | undefined;
  /**
   * How the stream travels: `'http'` (a plain HTTP/1.1 request whose body stays open for stdin and signals; loads no
   * WebSocket library) or `'websocket'`. A proxy that buffers request bodies holds back stdin until it ends over
   * `'http'`: use `'websocket'` behind one for interactive input.
   * @default 'http' on Node.js with the default `fetch`, else 'websocket'
   */
  transport?: ExecTransportKind | undefined;
}

type StreamState = 'connecting' | 'started' | 'reattaching' | 'finished' | 'failed';

/**
 * A running command over the streaming exec (plain HTTP or WebSocket, see {@link ExecStreamOptions.transport}). Iterate it for {@link ExecEvent}s; write stdin, close stdin
 * or send a signal while it runs. Created by `sandbox.commands.stream()`.
 *
 * A pause, fork or memory snapshot of the sandbox does not end the command: the stream waits until the sandbox runs
 * again and goes on from where it was (attached to the command by its id), so the output arrives once, in order,
 * followed by the real exit. Time while paused counts in the exit's `durationMs`.
 *
 * @example
 * ```ts
 * const stream = sandbox.commands.stream(['cat']);
 * stream.writeStdin('hello\n');
 * stream.closeStdin();
 * for await (const event of stream) {
 *   if (event.type === 'stdout') process.stdout.write(event.data);
 *   if (event.type === 'exit') console.log('exit code', event.exitCode);
 * }
 * ```
 */
export class ExecStream implements AsyncIterable<ExecEvent> {
  readonly #connection: ExecConnection;
  readonly #http: HttpClient;
  readonly #sandboxId: string;
  readonly #createdAtMs = Date.now();
  /** Set once a checkpoint detached the command from this stream (the `paused` frame). */
  #reattachment: Reattachment | undefined;
  readonly #events: ExecEvent[] = [];
  readonly #pendingInput: Array<{ stdin: Uint8Array } | { control: string }> = [];
  #state: StreamState = 'connecting';
  #failure: BurrowError | undefined;
  #wake: (() => void) | undefined;
  #iterating = false;
  readonly #onAbort: () => void;
  readonly #signal: AbortSignal | undefined;
  readonly #started: Promise<void>;
  #settleStarted: (error?: BurrowError) => void = () => undefined;

  /** @internal Use `sandbox.commands.stream()`. */
  constructor(http: HttpClient, sandboxId: string, request: ExecRequest, options: ExecStreamOptions = {}) {
    const path = `/sandboxes/${encodeURIComponent(sandboxId)}/exec/stream`;
    this.#http = http;
    this.#sandboxId = sandboxId;
    this.#signal = options.signal;
    this.#started = new Promise<void>((resolve, reject) => {
      this.#settleStarted = (error) => (error === undefined ? resolve() : reject(error));
    });
    this.#started.catch(() => undefined); // a caller who never asks must not see an unhandled rejection
    this.#onAbort = () =>
      this.#fail(
        new AbortedError('the command stream was aborted', {
          code: ClientErrorCode.aborted,
          cause: options.signal?.reason,
        }),
      );
    if (options.stdin !== undefined) {
      this.writeStdin(options.stdin);
      this.closeStdin();
    }
    const start = JSON.stringify({
      type: 'start',
      request,
      killOnDisconnect: options.killOnDisconnect ?? false,
    } satisfies { type: 'start'; request: ExecRequest; killOnDisconnect: boolean });
    const events: ExecConnectionEvents = {
      output: (channel, data) => this.#onOutput(channel, data),
      control: (text) => this.#onControl(text),
      failed: (error) => this.#fail(error),
    };
    const transport = options.transport ?? (http.usesNodeHttp() ? 'http' : 'websocket');
    this.#connection =
      transport === 'http'
        ? new HttpExecConnection(http, path, start, events)
        : new WebSocketExecConnection(http, path, start, events);
    if (options.signal?.aborted) queueMicrotask(this.#onAbort);
    else options.signal?.addEventListener('abort', this.#onAbort, { once: true });
  }

  /** Writes bytes (or UTF-8 text) to the command's stdin. Writes before the command starts are queued. */
  writeStdin(data: string | Uint8Array): void {
    this.#sendWhenStarted({ stdin: typeof data === 'string' ? Buffer.from(data, 'utf8') : data });
  }

  /** Closes the command's stdin (end of file for the command). */
  closeStdin(): void {
    this.#sendWhenStarted({ control: JSON.stringify({ type: 'stdin_close' } satisfies ExecClientFrame) });
  }

  /**
   * Sends a signal to the command.
   * @param signal - signal name. @default 'SIGTERM'
   */
  kill(signal: ExecSignal = 'SIGTERM'): void {
    this.#sendWhenStarted({ control: JSON.stringify({ type: 'signal', signal } satisfies ExecClientFrame) });
  }

  /**
   * Settles once the server has started the command (its process exists), so that closing the stream afterwards
   * leaves it running (unless `killOnDisconnect`). A stream closed before that never starts its command.
   * @throws the stream's failure (the error frame, a connection error, `AbortedError`) if it failed before starting
   */
  started(): Promise<void> {
    return this.#started;
  }

  /**
   * Closes the stream without waiting for the exit. The command keeps running unless the stream was opened with
   * `killOnDisconnect: true`; a command not started yet is never started. Idempotent.
   */
  close(): void {
    if (this.#state === 'finished' || this.#state === 'failed') return;
    this.#fail(new AbortedError('the command stream was closed', { code: ClientErrorCode.aborted }));
  }

  async *[Symbol.asyncIterator](): AsyncIterator<ExecEvent> {
    if (this.#iterating) throw new TypeError('an ExecStream can be iterated only once');
    this.#iterating = true;
    try {
      while (true) {
        const event = this.#events.shift();
        if (event !== undefined) {
          yield event;
          if (event.type === 'exit') return;
          continue;
        }
        if (this.#state === 'failed') throw this.#failure;
        await new Promise<void>((resolve) => {
          this.#wake = resolve;
        });
      }
    } finally {
      this.close();
    }
  }

  #onOutput(channel: number, data: Uint8Array): void {
    if (this.#state !== 'connecting' && this.#state !== 'started') return;
    if (channel === ExecChannel.stdout) this.#push({ type: 'stdout', data });
    else if (channel === ExecChannel.stderr) this.#push({ type: 'stderr', data });
  }

  #onControl(text: string): void {
    if (this.#state !== 'connecting' && this.#state !== 'started') return;
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    const frame = ExecServerFrameParser.parse(json);
    if (frame === INVALID) {
      this.#fail(
        new ProtocolError(`unexpected exec frame: ${text.slice(0, 200)}`, {
          code: ClientErrorCode.protocolError,
        }),
      );
      return;
    }
    switch (frame.type) {
      case 'started':
        this.#state = 'started';
        this.#settleStarted();
        for (const pending of this.#pendingInput.splice(0)) this.#send(pending);
        return;
      case 'exit': {
        const { type: _type, ...exit } = frame;
        this.#push({ type: 'exit', ...exit });
        this.#finish();
        return;
      }
      case 'paused':
        this.#reattach(frame.commandId, frame.offset);
        return;
      case 'error':
        this.#fail(errorFromWire(frame.error, 0));
        return;
    }
  }

  /** The command goes on inside the sandbox as `commandId`: follow it from `offset` once the sandbox runs. */
  #reattach(commandId: string, offset: number): void {
    this.#state = 'reattaching';
    this.#settleStarted();
    this.#connection.finish();
    this.#reattachment = new Reattachment(this.#http, this.#sandboxId, commandId, offset, {
      output: (type, data) => this.#push({ type, data }),
      exit: (exit) => {
        this.#push({ type: 'exit', ...exit, reason: null, durationMs: Date.now() - this.#createdAtMs });
        this.#finish();
      },
      failed: (error) => this.#fail(error),
    });
    for (const pending of this.#pendingInput.splice(0)) this.#send(pending);
  }

  #sendWhenStarted(input: { stdin: Uint8Array } | { control: string }): void {
    if (this.#state === 'connecting') this.#pendingInput.push(input);
    else if (this.#state === 'started' || this.#state === 'reattaching') this.#send(input);
  }

  #send(input: { stdin: Uint8Array } | { control: string }): void {
    const reattachment = this.#reattachment;
    if (reattachment === undefined) {
      if ('stdin' in input) this.#connection.sendStdin(input.stdin);
      else this.#connection.sendControl(input.control);
      return;
    }
    if ('stdin' in input) {
      reattachment.writeStdin(input.stdin);
      return;
    }
    const frame = JSON.parse(input.control) as ExecClientFrame;
    if (frame.type === 'stdin_close') reattachment.closeStdin();
    else if (frame.type === 'signal') reattachment.kill(frame.signal);
  }

  #push(event: ExecEvent): void {
    this.#events.push(event);
    this.#wakeUp();
  }

  #finish(): void {
    this.#state = 'finished';
    this.#settleStarted();
    this.#release();
    this.#reattachment?.close();
    this.#connection.finish();
    this.#wakeUp();
  }

  #fail(error: BurrowError): void {
    if (this.#state === 'finished' || this.#state === 'failed') return;
    this.#state = 'failed';
    this.#failure = error;
    this.#settleStarted(error);
    this.#release();
    this.#reattachment?.close();
    this.#connection.terminate();
    this.#wakeUp();
  }

  #release(): void {
    this.#signal?.removeEventListener('abort', this.#onAbort);
  }

  #wakeUp(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }
}
