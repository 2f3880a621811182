import { AsyncResource } from 'node:async_hooks';
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import {
  ErrorCode,
  EXEC_FRAME_MAX_PAYLOAD_BYTES,
  EXEC_FRAMES_MEDIA_TYPE,
  ExecFrameChannel,
  ExecFrameReader,
  type ExecServerFrame,
  execFrame,
  execFrameHeader,
  SandboxParamsSchema,
} from '@burrow/contract';
import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { Services } from '../services/services.js';
import { ApiError } from '../util/api-error.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { ExecSession, type ExecTransport, invalid } from './exec-session.js';
import { UNLIMITED_BODY_BYTES } from './http-limits.js';
import type { ZodApp } from './zod-app.js';

/** A request whose body brings no start frame within this is answered 408. */
const START_FRAME_TIMEOUT_MS = 30_000;
/** The connection of an answered stream whose client keeps its request body open is closed after this. */
const CLOSE_AFTER_ANSWER_MS = 2_000;

/** Route config of a request body that is a live input stream: the body-rate guard leaves it alone. */
export const INTERACTIVE_BODY = { interactiveBody: true } as const;

/**
 * `POST /v1/sandboxes/{id}/exec/stream`: the streaming exec over plain HTTP/1.1, for clients that would rather not
 * load a WebSocket library (the CLI's `burrow exec`). Both bodies are frames of the contract's exec-frames.ts; the
 * request body stays open while the command runs (stdin, `stdin_close`, signals) and its end is the end of stdin.
 * Until the command started, an error is an ordinary error answer (status and envelope); after, the `error` frame.
 */
export function registerExecHttpStreamRoute(app: ZodApp, services: Services): void {
  // The body stays a stream: frames are read as they arrive.
  app.addContentTypeParser(EXEC_FRAMES_MEDIA_TYPE, (_request, payload, done) => done(null, payload));
  app.post(
    '/sandboxes/:id/exec/stream',
    {
      bodyLimit: UNLIMITED_BODY_BYTES,
      config: INTERACTIVE_BODY,
      schema: {
        tags: ['sandboxes'],
        summary:
          `Streaming exec over HTTP (${EXEC_FRAMES_MEDIA_TYPE}): both bodies are frames [channel u8][length u32 BE]` +
          '[payload]. Client: channel 3 {type:"start",request} first, channel 0 stdin, channel 3 {type:"stdin_close"} ' +
          'or {type:"signal"}; the body\'s end ends stdin. Server: channel 3 {type:"started"}, channels 1|2 output, ' +
          'then channel 3 exit or error. Errors before the start are ordinary error answers',
        params: SandboxParamsSchema,
        response: { 200: z.string().describe(`exec frames (${EXEC_FRAMES_MEDIA_TYPE})`), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const body = request.body as unknown;
      if (!isReadable(body)) {
        throw new ApiError(ErrorCode.invalidRequest, 'the exec stream takes a body of exec frames', {
          hint: `send Content-Type: ${EXEC_FRAMES_MEDIA_TYPE} and a start frame (docs/exec-protocol.md §2)`,
        });
      }
      reply.hijack();
      bridge(body, request, reply.raw, services);
    },
  );
}

function isReadable(body: unknown): body is Readable {
  return typeof body === 'object' && body !== null && typeof (body as Readable).on === 'function';
}

/** Feeds the request body's frames to a session, in order, and answers on `response`. */
function bridge(body: Readable, request: FastifyRequest, response: ServerResponse, services: Services): void {
  const transport = new HttpExecTransport(response, request);
  const session = new ExecSession(transport, request, services);
  const reader = new ExecFrameReader();
  // One frame at a time: a start resolves before the stdin behind it is written.
  let queue: Promise<void> = Promise.resolve();
  const enqueue = (work: () => void | Promise<void>) => {
    queue = queue.then(work).catch((error: unknown) => session.fail(error));
  };
  const startDeadline = setTimeout(() => {
    if (transport.answered) return;
    session.fail(
      new ApiError(ErrorCode.requestTimeout, `no start frame arrived within ${START_FRAME_TIMEOUT_MS} ms`, {
        hint: 'send the start frame right after the headers (docs/exec-protocol.md §2)',
      }),
    );
  }, START_FRAME_TIMEOUT_MS);
  startDeadline.unref();
  response.once('close', () => {
    clearTimeout(startDeadline);
    session.onDisconnect();
  });
  // Body events run outside the request's async context: bound here, the start frame's work (an auto-resume, say)
  // records its events with the calling key as the actor instead of `system`.
  body.on(
    'data',
    AsyncResource.bind((chunk: Buffer) => {
      if (session.done) return;
      let frames: Array<{ channel: number; payload: Uint8Array }>;
      try {
        frames = reader.push(chunk);
      } catch (error) {
        session.fail(invalid((error as Error).message));
        return;
      }
      for (const { channel, payload } of frames) {
        const bytes = Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
        if (channel === ExecFrameChannel.control) {
          body.pause();
          enqueue(async () => {
            await session.onControl(bytes.toString('utf8'));
            body.resume();
          });
        } else if (channel === ExecFrameChannel.stdin) {
          enqueue(() => session.onStdin(bytes));
        } else {
          enqueue(() => {
            throw invalid(`frames from the client are on channel 0 (stdin) or 3 (control), not ${channel}`);
          });
        }
      }
    }),
  );
  body.on(
    'end',
    AsyncResource.bind(() => {
      clearTimeout(startDeadline);
      if (!reader.atBoundary) enqueue(() => session.fail(invalid('the request body ended inside a frame')));
      enqueue(() => session.onInputEnd());
    }),
  );
  body.on('error', () => undefined);
}

/** The answer of one HTTP exec stream: headers with the `started` frame, then frames, chunked. */
class HttpExecTransport implements ExecTransport {
  /** Whether the status line went out (the command started, or an error was answered). */
  answered = false;

  constructor(
    private readonly response: ServerResponse,
    private readonly request: FastifyRequest,
  ) {}

  get open(): boolean {
    return !this.response.destroyed && !this.response.writableEnded;
  }

  get bufferedBytes(): number {
    return this.response.writableLength;
  }

  sendOutput(channel: number, chunks: Buffer[], onSent: () => void): void {
    if (!this.open) return;
    let total = 0;
    for (const chunk of chunks) total += chunk.length;
    // One HTTP chunk per run: the frame header and its pieces corked together (no copy into one buffer).
    this.response.cork();
    for (let at = 0, index = 0; index < chunks.length; ) {
      const frameBytes = Math.min(total - at, EXEC_FRAME_MAX_PAYLOAD_BYTES);
      this.response.write(execFrameHeader(channel as ExecFrameChannel, frameBytes));
      let left = frameBytes;
      while (left > 0 && index < chunks.length) {
        const chunk = chunks[index] as Buffer;
        const piece = chunk.length <= left ? chunk : chunk.subarray(0, left);
        if (piece.length === chunk.length) index += 1;
        else chunks[index] = chunk.subarray(left);
        left -= piece.length;
        at += piece.length;
        const last = index === chunks.length && left === 0;
        this.response.write(piece, last ? () => onSent() : undefined);
      }
    }
    this.response.uncork();
  }

  sendControl(frame: ExecServerFrame): void {
    if (!this.open) return;
    if (!this.answered) {
      this.answered = true;
      this.response.writeHead(200, {
        'content-type': EXEC_FRAMES_MEDIA_TYPE,
        'cache-control': 'no-store',
        'x-request-id': this.request.id,
        // The request body is live input until the command ends: this connection never serves another request.
        connection: 'close',
      });
    }
    this.response.write(execFrame(ExecFrameChannel.control, JSON.stringify(frame)));
  }

  sendError(frame: Extract<ExecServerFrame, { type: 'error' }>, statusCode: number): void {
    if (!this.open) return;
    if (this.answered) {
      this.sendControl(frame);
      this.end();
      return;
    }
    this.answered = true;
    const text = JSON.stringify({ error: frame.error });
    this.response.writeHead(statusCode, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(text),
      'x-request-id': this.request.id,
      connection: 'close',
    });
    this.end(text);
  }

  end(text?: string): void {
    if (this.response.writableEnded) return;
    this.response.end(text);
    // A client that keeps its request body open after the last frame does not hold the connection.
    const socket = this.response.socket;
    if (socket === null || this.request.raw.complete) return;
    const timer = setTimeout(() => socket.destroy(), CLOSE_AFTER_ANSWER_MS);
    timer.unref();
    socket.once('close', () => clearTimeout(timer));
  }
}
