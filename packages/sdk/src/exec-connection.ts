import type { IncomingMessage } from 'node:http';
import { createRequire } from 'node:module';
import type WebSocket from 'ws';
import { EXEC_FRAMES_MEDIA_TYPE, ExecChannel, ExecFrameChannel, ExecFrameReader, execFrame } from './contract-wire.js';
import { type BurrowError, ClientErrorCode, ProtocolError } from './errors.js';
import { connectionError, errorFromBody, type HttpClient } from './http-client.js';
import { webSocketClass } from './ws-loader.js';

/** What a connection reports to its {@link ExecStream}. */
export interface ExecConnectionEvents {
  /** A piece of output on `channel` (1 stdout, 2 stderr). */
  output(channel: number, data: Uint8Array): void;
  /** A JSON control frame from the server, as text. */
  control(text: string): void;
  /** The connection failed (an error answer, a network error, an early close). */
  failed(error: BurrowError): void;
}

/** The transport of one streaming exec; the frames mean the same on both (docs/exec-protocol.md §2). */
export interface ExecConnection {
  /** Sends stdin bytes. */
  sendStdin(data: Uint8Array): void;
  /** Sends a JSON control frame (the start frame first). */
  sendControl(text: string): void;
  /** Closes after the last frame. */
  finish(): void;
  /** Drops the connection at once. */
  terminate(): void;
}

/** Which transport a stream uses: plain HTTP (Node.js only) or a WebSocket. */
export type ExecTransportKind = 'http' | 'websocket';

/**
 * The HTTP exec stream (`POST …/exec/stream`): one node:http request on its own connection whose body carries the
 * client's frames while the answer carries the server's. Loads node:http (or node:https) only, not `ws`.
 */
export class HttpExecConnection implements ExecConnection {
  readonly #request: import('node:http').ClientRequest;
  #done = false;

  constructor(http: HttpClient, path: string, start: string, events: ExecConnectionEvents) {
    const url = http.url(path);
    const require = createRequire(import.meta.url);
    const transport: typeof import('node:http') = require(url.protocol === 'https:' ? 'node:https' : 'node:http');
    this.#request = transport.request(url, {
      method: 'POST',
      // Its own connection: the request body stays open while the command runs, so the connection is never reused.
      agent: false,
      headers: { ...http.authHeaders(), 'content-type': EXEC_FRAMES_MEDIA_TYPE, 'transfer-encoding': 'chunked' },
    });
    const fail = (error: BurrowError) => {
      if (this.#done) return;
      this.#done = true;
      events.failed(error);
    };
    this.#request.on('response', (res: IncomingMessage) => {
      const status = res.statusCode ?? 0;
      if (status !== 200) {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const requestId = res.headers['x-request-id'];
          fail(
            errorFromBody(
              Buffer.concat(chunks).toString('utf8'),
              status,
              typeof requestId === 'string' ? requestId : '',
            ),
          );
          this.#request.destroy();
        });
        return;
      }
      const reader = new ExecFrameReader();
      res.on('data', (chunk: Buffer) => {
        if (this.#done) return;
        let frames: Array<{ channel: number; payload: Uint8Array }>;
        try {
          frames = reader.push(chunk);
        } catch (error) {
          fail(
            new ProtocolError(`bad exec frame: ${(error as Error).message}`, { code: ClientErrorCode.protocolError }),
          );
          return;
        }
        for (const frame of frames) {
          if (this.#done) return;
          if (frame.channel === ExecFrameChannel.control) events.control(Buffer.from(frame.payload).toString('utf8'));
          // A plain Uint8Array view (the chunk is a Buffer), as over the WebSocket.
          else
            events.output(
              frame.channel,
              new Uint8Array(frame.payload.buffer, frame.payload.byteOffset, frame.payload.byteLength),
            );
        }
      });
      res.on('end', () => fail(closedEarly('the answer ended')));
      res.on('error', (err) => fail(closedEarly(err.message)));
    });
    this.#request.on('error', (err) => fail(connectionError(http.connection.apiUrl, err)));
    this.#request.write(execFrame(ExecFrameChannel.control, start));
  }

  sendStdin(data: Uint8Array): void {
    if (!this.#done && data.byteLength > 0) this.#request.write(execFrame(ExecFrameChannel.stdin, data));
  }

  sendControl(text: string): void {
    if (!this.#done) this.#request.write(execFrame(ExecFrameChannel.control, text));
  }

  finish(): void {
    this.terminate();
  }

  terminate(): void {
    this.#done = true;
    this.#request.destroy();
  }
}

/** The WebSocket exec stream (`GET …/exec/stream` upgraded): loads `ws` on first use. */
export class WebSocketExecConnection implements ExecConnection {
  readonly #socket: WebSocket;
  /** Frames written before the socket opened; the start frame is sent first on open. */
  readonly #pending: Array<Buffer | string> = [];

  constructor(http: HttpClient, path: string, start: string, events: ExecConnectionEvents) {
    const url = http.url(path);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    this.#pending.push(start);
    this.#socket = new (webSocketClass())(url, { headers: http.authHeaders() });
    this.#socket.on('open', () => {
      for (const frame of this.#pending.splice(0)) this.#socket.send(frame);
    });
    this.#socket.on('message', (data, isBinary) => {
      const bytes = toBuffer(data);
      if (!isBinary) events.control(bytes.toString('utf8'));
      else events.output(bytes[0] ?? -1, new Uint8Array(bytes.buffer, bytes.byteOffset + 1, bytes.byteLength - 1));
    });
    this.#socket.on('unexpected-response', (req, res) => {
      void readBody(res).then((text) => {
        events.failed(errorFromBody(text, res.statusCode ?? 0, headerValue(res.headers['x-request-id'])));
        req.destroy();
      });
    });
    this.#socket.on('error', (err) => events.failed(connectionError(http.connection.apiUrl, err)));
    this.#socket.on('close', (code, reason) => events.failed(closedEarly(`${code} ${reason.toString()}`)));
  }

  sendStdin(data: Uint8Array): void {
    const frame = Buffer.allocUnsafe(data.byteLength + 1);
    frame[0] = ExecChannel.stdin;
    frame.set(data, 1);
    this.#send(frame);
  }

  sendControl(text: string): void {
    this.#send(text);
  }

  finish(): void {
    this.#socket.close(1000);
  }

  terminate(): void {
    this.#socket.terminate();
  }

  #send(frame: Buffer | string): void {
    if (this.#socket.readyState === this.#socket.CONNECTING) this.#pending.push(frame);
    else if (this.#socket.readyState === this.#socket.OPEN) this.#socket.send(frame);
  }
}

function closedEarly(detail: string): ProtocolError {
  return new ProtocolError(`the exec stream closed before the command's exit (${detail})`, {
    code: ClientErrorCode.protocolError,
    hint: 'the server may have restarted; run the command again',
  });
}

function toBuffer(data: WebSocket.RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

function headerValue(value: string | string[] | undefined): string {
  return Array.isArray(value) ? (value[0] ?? '') : (value ?? '');
}

function readBody(res: IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    res.on('data', (chunk: Buffer) => chunks.push(chunk));
    res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    res.on('error', () => resolve(Buffer.concat(chunks).toString('utf8')));
  });
}
