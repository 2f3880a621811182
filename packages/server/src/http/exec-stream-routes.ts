import { AsyncResource } from 'node:async_hooks';
import { ExecChannel, ExecClientFrameSchema, type ExecServerFrame, SandboxParamsSchema } from '@burrow/contract';
import type { SandboxProcess } from '@burrow/runtime';
import type { FastifyRequest } from 'fastify';
import type { WebSocket } from 'ws';
import type { Services } from '../services/services.js';
import { ApiError } from '../util/api-error.js';
import { invalidControlFrame, mapError } from './error-mapping.js';
import { principalOf } from './principal.js';
import { sendPrefixedBinary } from './ws-prefixed-frame.js';
import type { ZodApp } from './zod-app.js';

/** Pause process output when this many bytes wait in the socket buffer. */
const HIGH_WATER_BYTES = 1024 * 1024;
/** Resume process output when the socket buffer drops below this. */
const LOW_WATER_BYTES = 256 * 1024;

/** `GET /v1/sandboxes/{id}/exec/stream`: streaming exec over WebSocket (protocol in the contract's exec.ts). */
export function registerExecStreamRoutes(app: ZodApp, services: Services): void {
  app.get(
    '/sandboxes/:id/exec/stream',
    {
      websocket: true,
      schema: {
        tags: ['sandboxes'],
        summary:
          'Streaming exec (WebSocket upgrade). Client: text {type:"start",request}, binary [0, ...stdin], ' +
          '{type:"stdin_close"}, {type:"signal"}. Server: {type:"started"}, binary [1|2, ...bytes], then exit or error',
        params: SandboxParamsSchema,
      },
    },
    (socket, request) => new ExecSession(socket, request, services).listen(),
  );
}

/** One WebSocket exec: waits for `start`, bridges the process's streams, ends with `exit` or `error`. */
class ExecSession {
  private process: SandboxProcess | null = null;
  private starting = false;
  private finished = false;
  private timedOut = false;
  private readonly abort = new AbortController();
  private timer: NodeJS.Timeout | null = null;
  /** From the start frame: kill the process group when the socket closes before the command exits. */
  private killOnDisconnect = false;
  /**
   * Output read in this turn of the event loop and not sent yet: runs of one channel, in the order it was read.
   * Sent as one WebSocket message per run when the turn's I/O is done (`setImmediate`), and at once before the
   * exit frame. The exec agent's output frames reach the server as pieces of its 64 KiB socket reads (up to 32
   * reads per turn): one message and one `writev` per piece cost the server and the client more than the copy
   * they replace (ADR 0003, "Streamed output: one message per turn").
   */
  private outbox: Array<{ channel: number; chunks: Buffer[] }> = [];
  /** Bytes in {@link outbox}. */
  private outboxBytes = 0;
  private flushScheduled = false;

  constructor(
    private readonly socket: WebSocket,
    private readonly request: FastifyRequest,
    private readonly services: Services,
  ) {}

  listen(): void {
    // Socket events run outside the request's async context: bound here, the start frame's work (an auto-resume,
    // say) records its events with the calling key as the actor instead of `system`.
    this.socket.on(
      'message',
      AsyncResource.bind((data: Buffer, isBinary: boolean) => {
        this.onMessage(data, isBinary).catch((error: unknown) => this.fail(error));
      }),
    );
    this.socket.on('close', () => {
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
    });
    this.socket.on('error', (error) => this.request.log.warn({ err: error }, 'exec socket error'));
  }

  private async onMessage(data: Buffer, isBinary: boolean): Promise<void> {
    if (this.finished) return;
    if (isBinary) {
      if (this.process === null) throw invalid('send the start frame before stdin');
      if (data[0] !== ExecChannel.stdin) throw invalid('binary frames from the client carry stdin: first byte 0');
      this.process.stdin.write(data.subarray(1));
      return;
    }
    let json: unknown;
    try {
      json = JSON.parse(data.toString('utf8'));
    } catch {
      throw invalid('text frames are JSON control frames');
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
    const started = await this.services.exec.start(caller, id, request, this.abort.signal);
    const proc = started.process;
    this.process = proc;
    if (this.socket.readyState !== this.socket.OPEN) {
      await proc.kill('SIGKILL').catch(() => undefined);
      return;
    }
    proc.stdin.on('error', () => undefined);
    if (request.stdin !== undefined) proc.stdin.write(Buffer.from(request.stdin, 'base64'));
    this.sendJson({ type: 'started' });
    this.timer = setTimeout(() => {
      this.timedOut = true;
      proc.kill('SIGKILL').catch(() => undefined);
    }, request.timeoutMs);
    this.pipe(proc.stdout, ExecChannel.stdout);
    this.pipe(proc.stderr, ExecChannel.stderr);
    const exit = await proc.exited;
    this.clearTimer();
    this.finish({
      type: 'exit',
      exitCode: this.timedOut ? null : exit.exitCode,
      signal: this.timedOut ? 'SIGKILL' : exit.signal,
      timedOut: this.timedOut,
      reason: this.timedOut ? null : (exit.reason ?? null),
      durationMs: Date.now() - started.startedAtMs,
    });
  }

  private pipe(stream: NodeJS.ReadableStream & { pause(): void; resume(): void }, channel: number): void {
    stream.on('data', (chunk: Buffer) => {
      if (this.socket.readyState !== this.socket.OPEN || chunk.length === 0) return;
      const last = this.outbox[this.outbox.length - 1];
      if (last?.channel === channel) last.chunks.push(chunk);
      else this.outbox.push({ channel, chunks: [chunk] });
      this.outboxBytes += chunk.length;
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(() => this.flushOutput());
      }
      if (this.socket.bufferedAmount + this.outboxBytes > HIGH_WATER_BYTES) stream.pause();
    });
  }

  /** Send what {@link outbox} holds, one binary message per run; resumes the output once the socket drained. */
  private flushOutput(): void {
    this.flushScheduled = false;
    const runs = this.outbox;
    this.outbox = [];
    this.outboxBytes = 0;
    if (this.socket.readyState !== this.socket.OPEN) return;
    for (const run of runs) {
      sendPrefixedBinary(this.socket, run.channel, run.chunks, () => {
        if (this.socket.bufferedAmount + this.outboxBytes < LOW_WATER_BYTES) {
          this.process?.stdout.resume();
          this.process?.stderr.resume();
        }
      });
    }
  }

  private sendJson(frame: ExecServerFrame): void {
    if (this.socket.readyState === this.socket.OPEN) this.socket.send(JSON.stringify(frame));
  }

  private finish(frame: ExecServerFrame): void {
    if (this.finished) return;
    this.finished = true;
    // Output read before the exit goes out before it.
    if (this.outbox.length > 0) this.flushOutput();
    this.sendJson(frame);
    this.socket.close(1000);
  }

  private fail(error: unknown): void {
    const mapped = mapError(error, this.request.id);
    if (mapped.unexpected) this.request.log.error({ err: error }, 'exec stream failed');
    const { code, message, hint } = mapped.envelope.error;
    if (this.process !== null && !this.finished) this.process.kill('SIGKILL').catch(() => undefined);
    this.clearTimer();
    this.finish({
      type: 'error',
      error: { code, message, ...(hint === undefined ? {} : { hint }), requestId: this.request.id },
    });
  }

  private clearTimer(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }
}

function invalid(message: string): ApiError {
  return new ApiError('invalid_request', message, {
    hint: 'follow the exec stream protocol: a start frame first, stdin as binary frames with channel 0',
  });
}
