import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { ErrorCode } from '@burrow/contract';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ApiError } from '../util/api-error.js';
import { guardBody } from './body-guard.js';
import type { ZodApp } from './zod-app.js';

/** The body limit of routes that stream their body to disk (file and archive uploads): no size limit. */
export const UNLIMITED_BODY_BYTES = Number.MAX_SAFE_INTEGER;

/** How long and how many: the server's defences against slow and greedy clients. All configurable (loadConfig). */
export interface HttpLimits {
  /** A request's headers must arrive within this, ms (Node's `headersTimeout`). @default 20_000 (20 s) */
  headersTimeoutMs: number;
  /** A kept-alive connection with no request in flight closes after this, ms. @default 5_000 (5 s) */
  idleTimeoutMs: number;
  /**
   * A bounded (JSON) request body must arrive within this of the request's start, ms; streamed uploads have no
   * deadline, only {@link minBodyBytesPerSec}. 0: no deadline. @default 60_000 (1 minute)
   */
  requestTimeoutMs: number;
  /**
   * Least average rate of any request body over each {@link bodyRateWindowMs}, bytes/s (time the server holds the
   * body back does not count). 0: no minimum. @default 1024 (1 KiB/s)
   */
  minBodyBytesPerSec: number;
  /** Window of the {@link minBodyBytesPerSec} check, ms. @default 30_000 (30 s) */
  bodyRateWindowMs: number;
  /** Open connections one client address may hold; more get 429 `rate_limited` and are closed. 0: no cap. @default 256 */
  maxConnectionsPerAddress: number;
  /** Requests (streams and WebSockets included) one API key may have in flight; more get 429. 0: no cap. @default 128 */
  maxRequestsPerKey: number;
}

/** The limits {@link HttpLimits} documents as defaults. */
export const DEFAULT_HTTP_LIMITS: HttpLimits = {
  headersTimeoutMs: 20_000,
  idleTimeoutMs: 5_000,
  requestTimeoutMs: 60_000,
  minBodyBytesPerSec: 1024,
  bodyRateWindowMs: 30_000,
  maxConnectionsPerAddress: 256,
  maxRequestsPerKey: 128,
};

/** Seconds a 429 asks the client to wait (`Retry-After`). */
const RETRY_AFTER_SECONDS = 1;
/** After an answer sent before the request body's end, at most this much of the rest is read and dropped. */
const EARLY_ANSWER_DRAIN_BYTES = 4 * 1024 * 1024;
/** ... and the connection is held for at most this long, ms (the client closes it first once it has the answer). */
const EARLY_ANSWER_HOLD_MS = 2000;
/** An over-cap connection that sends no request within this is destroyed, ms. */
const OVER_CAP_GRACE_MS = 2000;

/** Whether a request announces a body. */
function hasBody(request: FastifyRequest): boolean {
  const length = request.headers['content-length'];
  return request.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

/**
 * Closes the connection of `raw`, answered before its body's end, gently. Node destroys a socket whose answer says
 * `Connection: close` as soon as the answer is written (`destroySoon`); with bytes of the body unread, that close
 * resets the connection, and a client still sending sees the reset (EPIPE, ECONNRESET) before it reads the answer.
 * Here the write side ends after the answer; the rest of the body is read and dropped up to
 * {@link EARLY_ANSWER_DRAIN_BYTES} (a client that sends its whole body before it reads gets the answer), then no
 * longer read (the client's sending stalls, without a reset); the socket is destroyed when the body ends, when the
 * client closes it, or after {@link EARLY_ANSWER_HOLD_MS}.
 */
function closeAfterDrain(raw: IncomingMessage): void {
  const socket = raw.socket;
  if (typeof socket?.destroySoon !== 'function') return;
  socket.destroySoon = () => {
    socket.end();
    if (raw.complete || raw.destroyed) {
      socket.destroy();
      return;
    }
    raw.unpipe();
    let bytes = 0;
    const destroy = () => {
      clearTimeout(timer);
      socket.destroy();
    };
    const timer = setTimeout(destroy, EARLY_ANSWER_HOLD_MS);
    timer.unref();
    raw.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes > EARLY_ANSWER_DRAIN_BYTES) raw.pause();
    });
    raw.once('end', destroy);
    socket.once('close', () => clearTimeout(timer));
    raw.resume();
  };
}

/**
 * The server's limits on slow and greedy clients, as fastify hooks (call before the auth hook is added, so a
 * connection over its address's cap is refused before any work):
 * - connections per address: the ones over {@link HttpLimits.maxConnectionsPerAddress} answer 429 and close;
 * - requests in flight per key: over {@link HttpLimits.maxRequestsPerKey}, 429 (checked by
 *   {@link registerKeyRequestCap}, after authentication);
 * - request bodies: {@link guardBody} (minimum rate, deadline for bounded bodies);
 * - an answer sent before the request body's end carries `Connection: close`: the unread rest of the body would
 *   otherwise be parsed as the next request (the client's next call on that connection waits until the idle
 *   timeout resets it). The rest is drained within bounds, then the connection closes ({@link closeAfterDrain}).
 * Header and idle timeouts are the Node server's own (see {@link serverTimeouts}).
 */
export function registerHttpLimits(app: ZodApp, limits: HttpLimits): void {
  const perAddress = new Map<string, number>();
  const overCap = new WeakSet<Socket>();
  app.server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress;
    if (limits.maxConnectionsPerAddress === 0 || address === undefined) return;
    const count = (perAddress.get(address) ?? 0) + 1;
    perAddress.set(address, count);
    socket.once('close', () => {
      const left = (perAddress.get(address) ?? 1) - 1;
      if (left === 0) perAddress.delete(address);
      else perAddress.set(address, left);
    });
    if (count <= limits.maxConnectionsPerAddress) return;
    overCap.add(socket);
    // It gets its 429 when a request comes; one that sends nothing is not held for the whole headers timeout.
    const grace = setTimeout(() => socket.destroy(), OVER_CAP_GRACE_MS);
    grace.unref();
    socket.once('data', () => clearTimeout(grace));
    socket.once('close', () => clearTimeout(grace));
  });

  app.addHook('onRequest', async (request, reply) => {
    if (!overCap.has(request.raw.socket)) return;
    reply.header('connection', 'close');
    throw rateLimited(
      reply,
      `more than ${limits.maxConnectionsPerAddress} open connections from ${request.raw.socket.remoteAddress}`,
      'reuse connections (keep-alive) instead of opening one per request, or close idle ones',
    );
  });

  // `complete === false`: a body still arriving on a real connection (app.inject's requests have no such flag).
  app.addHook('preParsing', async (request, reply, payload) => {
    if (request.raw.complete !== false || !hasBody(request)) return payload;
    // A live input stream (the HTTP exec stream's stdin) is bounded by its command's timeout, not by a rate.
    if ((request.routeOptions.config as { interactiveBody?: boolean }).interactiveBody === true) return payload;
    const streamed = request.routeOptions.bodyLimit === UNLIMITED_BODY_BYTES;
    const guarded = guardBody(request.raw, {
      minBytesPerSec: limits.minBodyBytesPerSec,
      windowMs: limits.bodyRateWindowMs,
      deadlineMs: streamed ? 0 : limits.requestTimeoutMs,
    });
    // Once answered, the request is no one's to time: closeAfterDrain bounds what is left.
    reply.raw.once('finish', guarded.stop);
    return guarded.body;
  });

  app.addHook('onSend', async (request, reply, payload) => {
    if (request.raw.complete === false && hasBody(request)) {
      reply.header('connection', 'close');
      closeAfterDrain(request.raw);
    }
    return payload;
  });
}

/**
 * The per-key cap on requests in flight: call after the auth hook is added (it needs `request.principal`). A request
 * counts from its authentication until its response closes (sent, or its connection gone).
 */
export function registerKeyRequestCap(app: ZodApp, limits: HttpLimits): void {
  if (limits.maxRequestsPerKey === 0) return;
  const inFlight = new Map<string, number>();
  app.addHook('onRequest', async (request, reply) => {
    const keyId = request.principal?.keyId;
    if (keyId === undefined) return;
    const count = inFlight.get(keyId) ?? 0;
    if (count >= limits.maxRequestsPerKey) {
      throw rateLimited(
        reply,
        `key ${keyId} has ${count} requests in flight, the most this server allows`,
        'wait for running calls (streams and WebSockets count) to end, or spread the work over more keys',
      );
    }
    inFlight.set(keyId, count + 1);
    // A response closes when it is sent or its connection goes (a WebSocket's too: its socket is assigned to it).
    reply.raw.once('close', () => {
      const left = (inFlight.get(keyId) ?? 1) - 1;
      if (left === 0) inFlight.delete(keyId);
      else inFlight.set(keyId, left);
    });
  });
}

/** The Node server options that carry {@link HttpLimits}' timeouts (fastify passes `http` to createServer). */
export function serverTimeouts(limits: HttpLimits): {
  keepAliveTimeout: number;
  requestTimeout: number;
  http: { headersTimeout: number; connectionsCheckingInterval: number };
} {
  return {
    keepAliveTimeout: limits.idleTimeoutMs,
    // Node's request timeout would also cut long uploads; guardBody bounds bodies instead.
    requestTimeout: 0,
    http: {
      headersTimeout: limits.headersTimeoutMs,
      // Node checks the headers timeout on this period: a quarter of it keeps the check within 25 % of its value.
      connectionsCheckingInterval: Math.max(100, Math.min(30_000, Math.floor(limits.headersTimeoutMs / 4))),
    },
  };
}

function rateLimited(reply: FastifyReply, message: string, hint: string): ApiError {
  reply.header('retry-after', String(RETRY_AFTER_SECONDS));
  return new ApiError(ErrorCode.rateLimited, message, { hint });
}
