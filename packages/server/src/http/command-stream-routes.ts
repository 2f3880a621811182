import {
  AttachCommandQuerySchema,
  CommandClientFrameSchema,
  CommandParamsSchema,
  type CommandServerFrame,
  ErrorCode,
  ExecChannel,
} from '@burrow/contract';
import type { SandboxFs } from '@burrow/runtime';
import type { FastifyRequest } from 'fastify';
import type { WebSocket } from 'ws';
import { LogCursor } from '../services/command-log-reader.js';
import { ControlKind, commandDir, readExit } from '../services/command-service.js';
import type { Services } from '../services/services.js';
import { ApiError } from '../util/api-error.js';
import { resizePayload } from './command-routes.js';
import { invalidControlFrame, mapError } from './error-mapping.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

/** Wait while the socket buffers more than this many bytes. */
const HIGH_WATER_BYTES = 1024 * 1024;
/** Shortest and longest pause between looks at the log when it has nothing new, ms. */
const POLL_MIN_MS = 5;
const POLL_MAX_MS = 50;

/**
 * `GET /v1/sandboxes/{id}/commands/{commandId}/stream?offset=&follow=`: attach to a background command (WebSocket).
 * Closing the socket never affects the command.
 */
export function registerCommandStreamRoutes(app: ZodApp, services: Services): void {
  app.get(
    '/sandboxes/:id/commands/:commandId/stream',
    {
      websocket: true,
      schema: {
        tags: ['commands'],
        summary:
          'Attach to a background command (WebSocket upgrade): output from an offset, then live; stdin, signal, resize. ' +
          'Server: {type:"attached",offset,droppedBytes}, binary [1|2, ...bytes], then exit, end or error. ' +
          'Client: binary [0, ...stdin], {type:"stdin_close"|"signal"|"resize"}. See docs/exec-protocol.md',
        params: CommandParamsSchema,
        querystring: AttachCommandQuerySchema,
      },
    },
    (socket, request) => {
      new AttachSession(socket, request, services).run().catch(() => undefined);
    },
  );
}

/** One attached client: streams the command's log from an offset and forwards its input. */
class AttachSession {
  private closed = false;
  private finished = false;

  constructor(
    private readonly socket: WebSocket,
    private readonly request: FastifyRequest,
    private readonly services: Services,
  ) {}

  async run(): Promise<void> {
    const { id, commandId } = this.request.params as { id: string; commandId: string };
    const query = this.request.query as { offset: number; follow: boolean };
    const caller = principalOf(this.request);
    // An attached stream is activity: the sandbox is never idle while it is open.
    const release = this.services.activity?.hold(id);
    this.socket.on('close', () => {
      this.closed = true;
      release?.();
    });
    this.socket.on('error', (error) => this.request.log.warn({ err: error }, 'attach socket error'));
    // Frames are handled one after another: each awaits lookups before it writes, and keystrokes sent as separate
    // frames must reach the command in the order they were typed.
    let inputs: Promise<void> = Promise.resolve();
    this.socket.on('message', (data: Buffer, isBinary: boolean) => {
      inputs = inputs
        .then(() => this.onMessage(caller, id, commandId, data, isBinary))
        .catch((error: unknown) => this.onInputError(id, commandId, error));
    });
    try {
      const { fs } = await this.services.commands.view(caller, id);
      await this.services.commands.info(fs, id, commandId);
      await this.stream(fs, id, commandId, query.offset, query.follow);
    } catch (error) {
      this.fail(error);
    }
  }

  private async stream(fs: SandboxFs, id: string, commandId: string, offset: number, follow: boolean): Promise<void> {
    const cursor = new LogCursor(fs, `${commandDir(commandId)}/log`, offset);
    const first = await cursor.next();
    this.send({ type: 'attached', offset: offset + first.droppedBytes, droppedBytes: first.droppedBytes });
    let pending = first.chunks;
    let idleMs = POLL_MIN_MS;
    while (!this.closed) {
      for (const chunk of pending) {
        if (this.closed) return;
        this.socket.send(
          Buffer.concat([Buffer.from([chunk.channel === 2 ? ExecChannel.stderr : ExecChannel.stdout]), chunk.data]),
          {
            binary: true,
          },
        );
        while (!this.closed && this.socket.bufferedAmount > HIGH_WATER_BYTES) await sleep(5);
      }
      if (pending.length > 0) idleMs = POLL_MIN_MS;
      // The exit file is written after the last output, so output read after seeing it is complete.
      const exit = pending.length === 0 ? await readExit(fs, commandId) : null;
      const read = await cursor.next();
      pending = read.chunks;
      if (pending.length > 0) continue;
      if (exit !== null) {
        this.services.commands.releaseControl(id, commandId);
        this.finish({ type: 'exit', ...exit, offset: cursor.offset });
        return;
      }
      if (!follow) {
        this.finish({ type: 'end', offset: cursor.offset });
        return;
      }
      await sleep(idleMs);
      idleMs = Math.min(POLL_MAX_MS, idleMs * 2);
    }
  }

  private async onMessage(
    caller: ReturnType<typeof principalOf>,
    id: string,
    commandId: string,
    data: Buffer,
    isBinary: boolean,
  ): Promise<void> {
    if (this.finished) return;
    const commands = this.services.commands;
    if (isBinary) {
      if (data[0] !== ExecChannel.stdin) throw invalid('binary frames from the client carry stdin: first byte 0');
      await commands.control(caller, id, commandId, ControlKind.stdin, data.subarray(1));
      return;
    }
    let json: unknown;
    try {
      json = JSON.parse(data.toString('utf8'));
    } catch {
      throw invalid('text frames are JSON control frames');
    }
    const parsed = CommandClientFrameSchema.safeParse(json);
    if (!parsed.success) throw invalidControlFrame(parsed.error.issues);
    const frame = parsed.data;
    if (frame.type === 'stdin_close')
      await commands.control(caller, id, commandId, ControlKind.stdinClose, Buffer.alloc(0));
    else if (frame.type === 'resize')
      await commands.control(caller, id, commandId, ControlKind.resize, resizePayload(frame));
    else await commands.kill(caller, id, commandId, frame.signal);
  }

  /**
   * Input (stdin, ^D, a resize) that reaches a command after its exit is dropped: a client sends it without knowing
   * of the exit, which this stream is about to deliver with all the output before it. Any other failure ends the
   * stream with its error.
   */
  private async onInputError(id: string, commandId: string, error: unknown): Promise<void> {
    if (error instanceof ApiError && error.code === ErrorCode.conflict) {
      const status = await this.services.commands
        .view(principalOf(this.request), id)
        .then(({ fs }) => this.services.commands.info(fs, id, commandId))
        .then((info) => info.status)
        .catch(() => null);
      if (status === 'exited') return;
    }
    this.fail(error);
  }

  private send(frame: CommandServerFrame): void {
    if (!this.closed && this.socket.readyState === this.socket.OPEN) this.socket.send(JSON.stringify(frame));
  }

  private finish(frame: CommandServerFrame): void {
    if (this.finished) return;
    this.finished = true;
    this.send(frame);
    this.socket.close(1000);
  }

  private fail(error: unknown): void {
    const mapped = mapError(error, this.request.id);
    if (mapped.unexpected) this.request.log.error({ err: error }, 'attach stream failed');
    const { code, message, hint } = mapped.envelope.error;
    this.finish({
      type: 'error',
      error: { code, message, ...(hint === undefined ? {} : { hint }), requestId: this.request.id },
    });
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function invalid(message: string): ApiError {
  return new ApiError('invalid_request', message, {
    hint: 'follow the attach protocol: stdin as binary frames with channel 0, JSON control frames (docs/exec-protocol.md)',
  });
}
