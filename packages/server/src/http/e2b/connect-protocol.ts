import type { ServerResponse } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { z } from 'zod';

/**
 * The server side of the Connect protocol with the JSON codec, the subset envd's clients use: unary calls
 * (`application/json` in and out) and server streams (`application/connect+json`: each message an envelope of a
 * flag byte and a 4-byte big-endian length, the stream closed by an end-stream envelope, flag 0x02, carrying
 * `{}` or `{"error":{code,message}}`). Written here rather than taken from `@connectrpc/connect-node`: its Node 20
 * line (2.1.x) would sit beside the 2.3 client the `e2b` package brings, and messages would need descriptors
 * generated from E2B's .proto files; the JSON forms of the few messages envd uses are validated with zod instead.
 */

/** Connect error codes and the HTTP status of a unary error with that code. */
export const ConnectCode = {
  canceled: 499,
  unknown: 500,
  invalid_argument: 400,
  deadline_exceeded: 504,
  not_found: 404,
  already_exists: 409,
  permission_denied: 403,
  resource_exhausted: 429,
  failed_precondition: 400,
  aborted: 409,
  out_of_range: 400,
  unimplemented: 501,
  internal: 500,
  unavailable: 503,
  unauthenticated: 401,
} as const;
export type ConnectCodeName = keyof typeof ConnectCode;

/** An RPC failure with a Connect code; the message says what to do. */
export class ConnectError extends Error {
  constructor(
    readonly code: ConnectCodeName,
    message: string,
  ) {
    super(message);
  }
}

/** Parse a request message with `schema`; a mismatch is `invalid_argument` naming the first issue. */
export function parseMessage<T extends z.ZodType>(schema: T, json: unknown): z.infer<T> {
  const parsed = schema.safeParse(json ?? {});
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  throw new ConnectError(
    'invalid_argument',
    `invalid request message: ${issue === undefined ? 'bad value' : `${issue.path.join('.') || '(root)'}: ${issue.message}`}`,
  );
}

/** The message of a server-stream request body: one envelope holding JSON. */
export function decodeEnvelope(body: Buffer): unknown {
  if (body.length < 5) throw new ConnectError('invalid_argument', 'a stream request carries one enveloped message');
  const length = body.readUInt32BE(1);
  if (5 + length > body.length) throw new ConnectError('invalid_argument', 'the request envelope is truncated');
  if ((body[0] as number) & 0x01) throw new ConnectError('unimplemented', 'compressed messages are not supported');
  const text = body.subarray(5, 5 + length).toString('utf8');
  try {
    return text === '' ? {} : JSON.parse(text);
  } catch {
    throw new ConnectError('invalid_argument', 'the request message is not JSON');
  }
}

/** One envelope: flag, length, JSON. */
export function envelope(flag: number, message: unknown): Buffer {
  const json = Buffer.from(JSON.stringify(message), 'utf8');
  const head = Buffer.alloc(5);
  head.writeUInt8(flag, 0);
  head.writeUInt32BE(json.length, 1);
  return Buffer.concat([head, json]);
}

/** Answer a unary error: the code's HTTP status and `{code, message}`. */
export function sendUnaryError(reply: FastifyReply, error: ConnectError): FastifyReply {
  return reply
    .code(ConnectCode[error.code])
    .type('application/json')
    .send({ code: error.code, message: error.message });
}

/**
 * An open server stream on a raw response: `send` writes a message, `end` closes with the end-stream envelope,
 * `drop` destroys the socket without one (what a client sees when the sandbox goes away).
 */
export class ServerStream {
  private ended = false;
  /** Resolves when the client goes away or the stream ended. */
  readonly closed: Promise<void>;

  constructor(private readonly raw: ServerResponse) {
    raw.writeHead(200, { 'content-type': 'application/connect+json' });
    raw.flushHeaders();
    this.closed = new Promise((resolve) => {
      raw.on('close', () => {
        this.ended = true;
        resolve();
      });
    });
  }

  get isOpen(): boolean {
    return !this.ended;
  }

  /** Write one message; resolves once the socket took it (backpressure). */
  async send(message: unknown): Promise<void> {
    if (this.ended) return;
    if (!this.raw.write(envelope(0, message))) {
      await Promise.race([new Promise((resolve) => this.raw.once('drain', resolve)), this.closed]);
    }
  }

  /** Close normally, or with an error in the end-stream message. */
  end(error?: ConnectError): void {
    if (this.ended) return;
    this.ended = true;
    const trailer = error === undefined ? {} : { error: { code: error.code, message: error.message } };
    this.raw.end(envelope(0x02, trailer));
  }

  /** Drop the connection without an end-stream message. */
  drop(): void {
    this.ended = true;
    this.raw.destroy();
  }
}

/** Open a server stream for `request` (fastify no longer manages the reply). */
export function openStream(request: FastifyRequest, reply: FastifyReply): ServerStream {
  reply.hijack();
  void request;
  return new ServerStream(reply.raw);
}

/** `Connect-Timeout-Ms` of a request, or null. */
export function connectTimeoutMs(request: FastifyRequest): number | null {
  const raw = request.headers['connect-timeout-ms'];
  const value = typeof raw === 'string' ? Number(raw) : Number.NaN;
  return Number.isInteger(value) && value > 0 ? value : null;
}

/** `Keepalive-Ping-Interval` of a request in ms, or null. */
export function keepaliveMs(request: FastifyRequest): number | null {
  const raw = request.headers['keepalive-ping-interval'];
  const value = typeof raw === 'string' ? Number(raw) : Number.NaN;
  return Number.isFinite(value) && value > 0 ? value * 1000 : null;
}
