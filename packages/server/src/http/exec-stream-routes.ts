import { AsyncResource } from 'node:async_hooks';
import { ExecChannel, type ExecServerFrame, SandboxParamsSchema } from '@burrow/contract';
import type { FastifyRequest } from 'fastify';
import type { WebSocket } from 'ws';
import type { Services } from '../services/services.js';
import { registerExecHttpStreamRoute } from './exec-http-stream.js';
import { ExecSession, type ExecTransport, invalid } from './exec-session.js';
import { sendPrefixedBinary } from './ws-prefixed-frame.js';
import type { ZodApp } from './zod-app.js';

/**
 * `/v1/sandboxes/{id}/exec/stream`: streaming exec over WebSocket (`GET`, protocol in the contract's exec.ts) and
 * over plain HTTP (`POST`, framing in the contract's exec-frames.ts), one session logic ({@link ExecSession}).
 */
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
    (socket, request) => listenOnWebSocket(socket, request, services),
  );
  registerExecHttpStreamRoute(app, services);
}

/** Bridges one exec WebSocket to its {@link ExecSession}. */
function listenOnWebSocket(socket: WebSocket, request: FastifyRequest, services: Services): void {
  const session = new ExecSession(new WebSocketExecTransport(socket), request, services);
  // Socket events run outside the request's async context: bound here, the start frame's work (an auto-resume,
  // say) records its events with the calling key as the actor instead of `system`.
  socket.on(
    'message',
    AsyncResource.bind((data: Buffer, isBinary: boolean) => {
      if (session.done) return;
      const handled = isBinary ? onBinary(session, data) : session.onControl(data.toString('utf8'));
      handled.catch((error: unknown) => session.fail(error));
    }),
  );
  socket.on('close', () => session.onDisconnect());
  socket.on('error', (error) => request.log.warn({ err: error }, 'exec socket error'));
}

async function onBinary(session: ExecSession, data: Buffer): Promise<void> {
  if (data[0] !== ExecChannel.stdin) throw invalid('binary frames from the client carry stdin: first byte 0');
  session.onStdin(data.subarray(1));
}

/** Output as binary messages `[channel, ...bytes]`, control frames as text messages. */
class WebSocketExecTransport implements ExecTransport {
  constructor(private readonly socket: WebSocket) {}

  get open(): boolean {
    return this.socket.readyState === this.socket.OPEN;
  }

  get bufferedBytes(): number {
    return this.socket.bufferedAmount;
  }

  sendOutput(channel: number, chunks: Buffer[], onSent: () => void): void {
    sendPrefixedBinary(this.socket, channel, chunks, onSent);
  }

  sendControl(frame: ExecServerFrame): void {
    if (this.open) this.socket.send(JSON.stringify(frame));
  }

  sendError(frame: Extract<ExecServerFrame, { type: 'error' }>): void {
    this.sendControl(frame);
    this.end();
  }

  end(): void {
    this.socket.close(1000);
  }
}
