import { Agent, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import {
  ERROR_HTTP_STATUS,
  ErrorCode,
  PREVIEW_ACCESS_HEADER,
  PREVIEW_COOKIE,
  PREVIEW_SIGNATURE_PARAM,
} from '@burrow/contract';
import { createProxyServer } from 'http-proxy-3';
import type { Logger } from 'pino';
import type { PortService, PreviewUpstream } from '../services/port-service.js';
import type { PreviewTarget } from '../services/preview-host.js';
import { ApiError } from '../util/api-error.js';
import type { Clock } from '../util/clock.js';
import { newId } from '../util/ids.js';

/** Options of {@link installPreviewProxy}. */
export interface PreviewProxyOptions {
  ports: PortService;
  clock: Clock;
  logger: Logger;
}

/** A running preview proxy. */
export interface PreviewProxy {
  /** Close the upstream connections kept alive. */
  close(): void;
}

const ACCESS_HEADER = PREVIEW_ACCESS_HEADER.toLowerCase();

/**
 * Serve preview URLs on `server` (the API's own listener): a request or WebSocket upgrade whose `Host` is
 * `<port>-sbx-<id>.<previewDomain>` is checked (public port, access token, signed URL or its cookie), wakes a
 * paused sandbox, and is proxied to the port inside through the sandbox's router (http-proxy-3: streaming bodies
 * both ways, upgrades, upstream keep-alive). Every other request goes on to the API untouched.
 *
 * Requests to the sandbox lose `X-Burrow-*` headers and Burrow's cookie; answers lose `X-Burrow-*` headers and
 * cookies named like Burrow's, and `Set-Cookie` loses its `Domain` attribute, so a sandbox can set cookies only for
 * its own preview host, never for the API's host or another sandbox's.
 */
export function installPreviewProxy(server: Server, options: PreviewProxyOptions): PreviewProxy {
  const { ports, logger } = options;
  const agent = new Agent({ keepAlive: true, maxSockets: 256, maxFreeSockets: 64 });
  const proxy = createProxyServer({ xfwd: true, agent, ws: true });
  proxy.on('proxyRes', (proxyRes) => cleanResponseHeaders(proxyRes.headers));
  proxy.on('error', () => undefined);
  const versions = new Map<string, number>();
  /** Drop kept-alive connections to a sandbox whose row changed (a pause and resume reset them all). */
  const forgetStale = (upstream: PreviewUpstream): void => {
    if (versions.get(upstream.sandboxId) === upstream.version) return;
    versions.set(upstream.sandboxId, upstream.version);
    for (const [name, sockets] of Object.entries(agent.freeSockets)) {
      if (name.startsWith(`${upstream.address}:`)) for (const socket of sockets ?? []) socket.destroy();
    }
  };

  const original = server.emit.bind(server);
  // fastify and @fastify/websocket listen on `request` and `upgrade`: preview hosts are taken before they see them.
  server.emit = ((event: string, ...args: unknown[]) => {
    if (event === 'request' || event === 'upgrade') {
      const request = args[0] as IncomingMessage;
      const target = ports.hosts.parse(request.headers.host);
      if (target !== null) {
        const requestId = newId('req');
        const handled =
          event === 'request'
            ? serveRequest(request, args[1] as ServerResponse, target, requestId)
            : serveUpgrade(request, args[1] as Duplex, args[2] as Buffer, target, requestId);
        handled.catch((error: unknown) => logger.error({ err: error, requestId }, 'preview request failed'));
        return true;
      }
    }
    return original(event as never, ...(args as never[]));
  }) as typeof server.emit;

  async function serveRequest(
    request: IncomingMessage,
    response: ServerResponse,
    target: PreviewTarget,
    requestId: string,
  ): Promise<void> {
    response.setHeader('x-request-id', requestId);
    let upstream: PreviewUpstream;
    try {
      const port = checkPort(target);
      const granted = await authorize(request, port, target.sandboxId);
      if (granted.setCookie !== undefined) {
        // The signature moves into a cookie of this host, and the browser loads the URL without it.
        response.writeHead(302, { location: granted.location ?? '/', 'set-cookie': granted.setCookie });
        response.end();
        return;
      }
      upstream = await ports.upstream(target.sandboxId, port);
    } catch (error) {
      sendError(response, request, error, requestId);
      return;
    }
    forgetStale(upstream);
    const release = ports.hold(upstream.sandboxId);
    response.once('close', release);
    cleanRequestHeaders(request);
    proxy.web(request, response, { target: `http://${upstream.address}:${upstream.port}` }, (error) => {
      if (!response.headersSent) sendError(response, request, upstreamError(upstream, error), requestId);
      else response.destroy();
    });
  }

  async function serveUpgrade(
    request: IncomingMessage,
    socket: Duplex,
    head: Buffer,
    target: PreviewTarget,
    requestId: string,
  ): Promise<void> {
    socket.on('error', () => undefined);
    let upstream: PreviewUpstream;
    try {
      const port = checkPort(target);
      const granted = await authorize(request, port, target.sandboxId);
      if (granted.setCookie !== undefined) {
        throw new ApiError(ErrorCode.invalidRequest, 'a signed URL opens in a page load, not in a WebSocket', {
          hint: 'load the signed URL first (it sets a cookie), then open the WebSocket without the signature',
        });
      }
      upstream = await ports.upstream(target.sandboxId, port);
    } catch (error) {
      writeSocketError(socket, error, requestId);
      return;
    }
    forgetStale(upstream);
    const release = ports.hold(upstream.sandboxId);
    socket.once('close', release);
    cleanRequestHeaders(request);
    proxy.ws(request, socket, head, { target: `ws://${upstream.address}:${upstream.port}` }, (error) => {
      if (socket.writable) writeSocketError(socket, upstreamError(upstream, error), requestId);
      else socket.destroy();
    });
  }

  /**
   * Whether the request may reach `port` of the sandbox: a public port, the access token, a valid signed-URL
   * cookie; a signed URL's query parameter answers with the cookie to set and where to go next.
   * @throws ApiError `preview_access_denied`, `preview_link_expired`, `preview_link_invalid`
   */
  async function authorize(
    request: IncomingMessage,
    port: number,
    sandboxId: string,
  ): Promise<{ setCookie?: string; location?: string }> {
    const url = new URL(request.url ?? '/', 'http://preview.invalid');
    const signed = url.searchParams.get(PREVIEW_SIGNATURE_PARAM);
    const now = options.clock.nowMs();
    if (signed !== null) {
      checkSignature(ports.access.verifySignature(sandboxId, port, signed, now));
      url.searchParams.delete(PREVIEW_SIGNATURE_PARAM);
      const maxAgeS = Math.max(1, Math.floor((Number(signed.split('.')[0]) - now) / 1000));
      return {
        setCookie: `${PREVIEW_COOKIE}=${signed}; Max-Age=${maxAgeS}; Path=/; HttpOnly; SameSite=Lax`,
        location: `${url.pathname}${url.search}`,
      };
    }
    const token = request.headers[ACCESS_HEADER];
    if (typeof token === 'string') {
      if (ports.access.checkToken(sandboxId, token)) return {};
      throw new ApiError(ErrorCode.previewAccessDenied, `the access token does not open sandbox ${sandboxId}`, {
        hint: 'send the token `burrow ports url ID PORT` prints, in the X-Burrow-Access-Token header',
      });
    }
    const cookie = readCookie(request.headers.cookie, PREVIEW_COOKIE);
    if (cookie !== undefined) {
      checkSignature(ports.access.verifySignature(sandboxId, port, cookie, now));
      return {};
    }
    if (await ports.isPublic(sandboxId, port)) return {};
    throw new ApiError(ErrorCode.previewAccessDenied, `port ${port} of sandbox ${sandboxId} is private`, {
      hint:
        'send the X-Burrow-Access-Token header, open a signed URL (`burrow ports url ID PORT --signed`), or make ' +
        'the port public (`burrow ports url ID PORT --public`)',
    });
  }

  return {
    close: () => {
      agent.destroy();
      proxy.close();
    },
  };
}

function checkPort(target: PreviewTarget): number {
  if (target.kind === 'bad_port') {
    throw new ApiError(ErrorCode.invalidRequest, `port ${target.text} is outside 1-65535`, {
      hint: 'preview hosts are <port>-<sandbox label>.<previewDomain> with a port of 1-65535',
    });
  }
  return target.port;
}

function checkSignature(check: 'ok' | 'expired' | 'invalid'): void {
  if (check === 'expired') {
    throw new ApiError(ErrorCode.previewLinkExpired, 'this signed preview URL has expired', {
      hint: 'mint a new one: `burrow ports url ID PORT --signed --ttl 1h`',
    });
  }
  if (check === 'invalid') {
    throw new ApiError(ErrorCode.previewLinkInvalid, 'this signed preview URL is not valid for this sandbox and port', {
      hint: 'use the URL exactly as `burrow ports url ID PORT --signed` printed it',
    });
  }
}

function upstreamError(upstream: PreviewUpstream, error: Error): ApiError {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'ECONNREFUSED' || code === 'ECONNRESET' || code === 'EHOSTUNREACH' || code === 'ETIMEDOUT') {
    return new ApiError(
      ErrorCode.portNotListening,
      `nothing in sandbox ${upstream.sandboxId} accepts connections on port ${upstream.port}`,
      { hint: `start a server on 0.0.0.0:${upstream.port} inside the sandbox (a 127.0.0.1 one is not reachable)` },
    );
  }
  return new ApiError(ErrorCode.portNotListening, `port ${upstream.port} of sandbox ${upstream.sandboxId} failed`, {
    hint: 'the server inside closed the connection; see its log',
    cause: error,
  });
}

/** The envelope of `error` (an ApiError, or internal_error), as JSON or, for a browser, a small HTML page. */
function envelope(error: unknown, requestId: string): { status: number; body: Record<string, unknown> } {
  if (error instanceof ApiError) {
    return {
      status: ERROR_HTTP_STATUS[error.code],
      body: {
        error: {
          code: error.code,
          message: error.message,
          ...(error.hint === undefined ? {} : { hint: error.hint }),
          ...(error.details === undefined ? {} : { details: error.details }),
          requestId,
        },
      },
    };
  }
  return {
    status: 500,
    body: { error: { code: ErrorCode.internal, message: 'the preview request failed', requestId } },
  };
}

function sendError(response: ServerResponse, request: IncomingMessage, error: unknown, requestId: string): void {
  const { status, body } = envelope(error, requestId);
  const wantsHtml = (request.headers.accept ?? '').includes('text/html');
  const inner = body.error as { code: string; message: string; hint?: string };
  const text = wantsHtml
    ? `<!doctype html><title>${status} ${escapeHtml(inner.code)}</title><h1>${escapeHtml(inner.message)}</h1>` +
      `<p>${escapeHtml(inner.hint ?? '')}</p><p><small>${inner.code} · ${requestId}</small></p>\n`
    : `${JSON.stringify(body)}\n`;
  response.writeHead(status, {
    'content-type': wantsHtml ? 'text/html; charset=utf-8' : 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
    'x-request-id': requestId,
  });
  response.end(text);
}

function writeSocketError(socket: Duplex, error: unknown, requestId: string): void {
  const { status, body } = envelope(error, requestId);
  const text = `${JSON.stringify(body)}\n`;
  socket.end(
    `HTTP/1.1 ${status} ${status === 401 ? 'Unauthorized' : 'Error'}\r\ncontent-type: application/json\r\n` +
      `content-length: ${Buffer.byteLength(text)}\r\nx-request-id: ${requestId}\r\nconnection: close\r\n\r\n${text}`,
  );
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** The value of cookie `name` in a `Cookie` header. */
function readCookie(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const [key, ...rest] = part.trim().split('=');
    if (key === name) return rest.join('=');
  }
  return undefined;
}

/** Drop what the sandbox must not see: `X-Burrow-*` headers (the access token) and Burrow's cookie. */
function cleanRequestHeaders(request: IncomingMessage): void {
  for (const name of Object.keys(request.headers)) {
    if (name.startsWith('x-burrow-')) delete request.headers[name];
  }
  const cookie = request.headers.cookie;
  if (cookie !== undefined) {
    const kept = cookie
      .split(';')
      .map((part) => part.trim())
      .filter((part) => part !== '' && !part.startsWith(`${PREVIEW_COOKIE}=`));
    if (kept.length === 0) delete request.headers.cookie;
    else request.headers.cookie = kept.join('; ');
  }
}

/**
 * Drop what would let the sandbox speak for Burrow: `X-Burrow-*` and `X-Request-Id` headers, cookies named
 * `burrow_*`, and the `Domain` attribute of every other cookie (host-only cookies reach only this preview host).
 */
export function cleanResponseHeaders(headers: Record<string, string | string[] | undefined>): void {
  for (const name of Object.keys(headers)) {
    if (name.startsWith('x-burrow-') || name === 'x-request-id') delete headers[name];
  }
  const cookies = headers['set-cookie'];
  if (cookies === undefined) return;
  const kept = (Array.isArray(cookies) ? cookies : [cookies])
    .filter((cookie) => !/^\s*burrow_/i.test(cookie))
    .map((cookie) =>
      cookie
        .split(';')
        .filter((attribute) => !/^\s*domain\s*=/i.test(attribute))
        .join(';'),
    );
  if (kept.length === 0) delete headers['set-cookie'];
  else headers['set-cookie'] = kept;
}
