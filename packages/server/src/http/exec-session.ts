import { ExecChannel, ExecClientFrameSchema, type ExecServerFrame } from '@burrow/contract';
import type { SandboxProcess } from '@burrow/runtime';
import type { FastifyRequest } from 'fastify';
import type { Services } from '../services/services.js';
import { ApiError } from '../util/api-error.js';
import { newId } from '../util/ids.js';
import { invalidControlFrame, mapError } from './error-mapping.js';
import { principalOf } from './principal.js';

/** Pause process output when this many bytes wait in the connection's buffer. */
const HIGH_WATER_BYTES = 1024 * 1024;
/** Resume process output when the connection's buffer drops below this. */
const LOW_WATER_BYTES = 256 * 1024;

/**
 * What a streaming exec needs of its connection (a WebSocket, or an HTTP request and its response): the session's
 * semantics (start, output order, backpressure, timeout, disconnect) are the same on both.
 */
export interface ExecTransport {
  /** Whether frames can still be sent (the peer has not gone away). */
  readonly open: boolean;
  /** Bytes sent but not yet handed to the kernel. */
  readonly bufferedBytes: number;
  /** Sends one run of output on `channel`; `onSent` runs once it was handed to the kernel. */
  sendOutput(channel: number, chunks: Buffer[], onSent: () => void): void;
  /** Sends a JSON control frame. */
  sendControl(frame: ExecServerFrame): void;
  /** Ends with `error` as the last frame; `statusCode` is the error's HTTP status (for a stream not answered yet). */
  sendError(frame: Extract<ExecServerFrame, { type: 'error' }>, statusCode: number): void;
  /** Ends the stream normally, after the last frame. */
  end(): void;
}

/**
 * One streaming exec: waits for `start`, bridges the process's streams, ends with `exit` or `error`. The transport
 * feeds it the client's frames ({@link onStdin}, {@link onControl}, {@link onInputEnd}) and tells it when the
 * client went away ({@link onDisconnect}).
 */
export class ExecSession {
  private process: SandboxProcess | null = null;
  private starting = false;
  private finished = false;
  private timedOut = false;
  private readonly abort = new AbortController();
  private timer: NodeJS.Timeout | null = null;
  /** From the start frame: kill the process group when the client goes away before the command exits. */
  private killOnDisconnect = false;
  /**
   * Output read in this turn of the event loop and not sent yet: runs of one channel, in the order it was read.
   * Sent as one message per run when the turn's I/O is done (`setImmediate`), and at once before the exit frame.
   * The exec agent's output frames reach the server as pieces of its 64 KiB socket reads (up to 32 reads per turn):
   * one message and one `writev` per piece cost the server and the client more than the copy they replace
   * (ADR 0003, "Streamed output: one message per turn").
   */
  private outbox: Array<{ channel: number; chunks: Buffer[] }> = [];
  /** Bytes in {@link outbox}. */
  private outboxBytes = 0;
  private flushScheduled = false;

  constructor(
    private readonly transport: ExecTransport,
    private readonly request: FastifyRequest,
    private readonly services: Services,
  ) {}

  /** Whether the session ended (its last frame was sent or the client is gone). */
  get done(): boolean {
    return this.finished;
  }

  /** Stdin bytes from the client. */
  onStdin(data: Buffer): void {
    if (this.finished) return;
    if (this.process === null) throw invalid('send the start frame before stdin');
    this.process.stdin.write(data);
  }

  /** A JSON control frame from the client. */
  async onControl(text: string): Promise<void> {
    if (this.finished) return;
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw invalid('control frames are JSON');
    }
    const parsed = ExecClientFrameSchema.safeParse(json);
    if (!parsed.success) throw invalidControlFrame(parsed.error.issues);
    const frame = parsed.data;
    if (frame.type === 'start') {
      if (this.process !== null || this.starting) throw invalid('start was already sent');
      this.starting = true;
      this.killOnDisconnect = frame.killOnDisconnect;
      await this.start(frame.request);
    } else if (this.process === null) {
      throw invalid('send the start frame first');
    } else if (frame.type === 'stdin_close') {
      this.process.stdin.end();
    } else {
      await this.process.kill(frame.signal);
    }
  }

  /** The client can send nothing more (the HTTP request body ended): its stdin ends. */
  onInputEnd(): void {
    if (this.finished) return;
    if (this.process === null && !this.starting) {
      this.fail(invalid('the request body ended before a start frame'));
      return;
    }
    this.process?.stdin.end();
  }

  /** The client went away before the last frame. */
  onDisconnect(): void {
    if (this.finished) return;
    if (this.process === null || this.killOnDisconnect) {
      // Still starting (the abort kills it once started), or the client asked for it.
      this.abort.abort();
      this.process?.kill('SIGKILL').catch(() => undefined);
      this.clearTimer();
      return;
    }
    // The command runs on to its exit or timeout; its output has nobody to go to and is drained.
    this.process.stdin.end();
    this.process.stdout.resume();
    this.process.stderr.resume();
  }

  /** Ends the session with the error frame for `error` (a refused frame, a failed start). */
  fail(error: unknown): void {
    const mapped = mapError(error, this.request.id);
    if (mapped.unexpected) this.request.log.error({ err: error }, 'exec stream failed');
    const { code, message, hint } = mapped.envelope.error;
    if (this.process !== null && !this.finished) this.process.kill('SIGKILL').catch(() => undefined);
    this.clearTimer();
    if (this.finished) return;
    this.finished = true;
    if (this.outbox.length > 0) this.flushOutput();
    this.transport.sendError(
      { type: 'error', error: { code, message, ...(hint === undefined ? {} : { hint }), requestId: this.request.id } },
      mapped.statusCode,
    );
  }

  private async start(request: {
    cmd: string | string[];
    env: Record<string, string>;
    cwd?: string | undefined;
    user?: string | undefined;
    timeoutMs: number;
    stdin?: string | undefined;
  }): Promise<void> {
    const caller = principalOf(this.request);
    const id = (this.request.params as { id: string }).id;
    // A command streamed here outlives a pause, fork or memory snapshot as a command of its own (`paused` frame).
    const started = await this.services.exec.start(
      caller,
      id,
      { ...request, detachAs: newId('cmd') },
      this.abort.signal,
    );
    const proc = started.process;
    this.process = proc;
    if (!this.transport.open) {
      await proc.kill('SIGKILL').catch(() => undefined);
      return;
    }
    proc.stdin.on('error', () => undefined);
    if (request.stdin !== undefined) proc.stdin.write(Buffer.from(request.stdin, 'base64'));
    this.transport.sendControl({ type: 'started' });
    this.timer = setTimeout(() => {
      this.timedOut = true;
      proc.kill('SIGKILL').catch(() => undefined);
    }, request.timeoutMs);
    this.pipe(proc.stdout, ExecChannel.stdout);
    this.pipe(proc.stderr, ExecChannel.stderr);
    // Settles once started: the client's later frames (stdin, signals) are handled while the command runs.
    proc.exited.then(
      (exit) => this.exited(exit, started.startedAtMs),
      (error: unknown) => this.fail(error),
    );
  }

  private exited(exit: Awaited<SandboxProcess['exited']>, startedAtMs: number): void {
    this.clearTimer();
    if (exit.detached !== undefined) {
      // Every byte before `offset` went out on this stream (the streams ended before `exited` settled).
      this.finish({ type: 'paused', commandId: exit.detached.commandId, offset: exit.detached.offset });
      return;
    }
    this.finish({
      type: 'exit',
      exitCode: this.timedOut ? null : exit.exitCode,
      signal: this.timedOut ? 'SIGKILL' : exit.signal,
      timedOut: this.timedOut,
      reason: this.timedOut ? null : (exit.reason ?? null),
      durationMs: Date.now() - startedAtMs,
    });
  }

  private pipe(stream: NodeJS.ReadableStream & { pause(): void; resume(): void }, channel: number): void {
    stream.on('data', (chunk: Buffer) => {
      if (!this.transport.open || chunk.length === 0) return;
      const last = this.outbox[this.outbox.length - 1];
      if (last?.channel === channel) last.chunks.push(chunk);
      else this.outbox.push({ channel, chunks: [chunk] });
      this.outboxBytes += chunk.length;
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(() => this.flushOutput());
      }
      if (this.transport.bufferedBytes + this.outboxBytes > HIGH_WATER_BYTES) stream.pause();
    });
  }

  /** Send what {@link outbox} holds, one message per run; resumes the output once the connection drained. */
  private flushOutput(): void {
    this.flushScheduled = false;
    const runs = this.outbox;
    this.outbox = [];
    this.outboxBytes = 0;
    if (!this.transport.open) return;
    for (const run of runs) {
      this.transport.sendOutput(run.channel, run.chunks, () => {
        if (this.transport.bufferedBytes + this.outboxBytes < LOW_WATER_BYTES) {
          this.process?.stdout.resume();
          this.process?.stderr.resume();
        }
      });
    }
  }

  private finish(frame: ExecServerFrame): void {
    if (this.finished) return;
    this.finished = true;
    // Output read before the exit goes out before it.
    if (this.outbox.length > 0) this.flushOutput();
    this.transport.sendControl(frame);
    this.transport.end();
  }

  private clearTimer(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }
}

/** An `invalid_request` error for a frame out of protocol. */
export function invalid(message: string): ApiError {
  return new ApiError('invalid_request', message, {
    hint: 'follow the exec stream protocol (docs/exec-protocol.md §2): a start frame first, then stdin on channel 0',
  });
}
