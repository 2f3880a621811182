import { ErrorCode } from '@burrow/contract';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ApiError } from '../util/api-error.js';
import { bearerSecret } from './principal.js';

/** Name of the web console's session cookie; it carries the signed-in API key and is HttpOnly. */
export const SESSION_COOKIE = 'burrow_session';
/** Header every state-changing request signed in by the cookie must carry (see {@link sessionSecret}). */
export const CSRF_HEADER = 'x-burrow-csrf';
/** Lifetime of a console session cookie, seconds (12 hours). */
export const SESSION_MAX_AGE_S = 12 * 60 * 60;

/** The value of cookie `name` in a `Cookie` header, or null. */
export function cookieValue(header: string | undefined, name: string): string | null {
  if (header === undefined) return null;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0 || part.slice(0, eq).trim() !== name) continue;
    try {
      return decodeURIComponent(part.slice(eq + 1).trim());
    } catch {
      return null;
    }
  }
  return null;
}

/**
 * The API key secret of the console session cookie, or null without one. Cross-site use is refused: the cookie is
 * `SameSite=Strict`, a state-changing method must carry {@link CSRF_HEADER} (a header another site's form cannot set
 * and its script cannot send without a CORS preflight this server never grants), and a WebSocket upgrade must come
 * from a page of this server (its `Origin` names this host).
 * @throws ApiError `forbidden` for a cookie request that fails these checks
 */
export function sessionSecret(request: FastifyRequest): string | null {
  const secret = cookieValue(request.headers.cookie, SESSION_COOKIE);
  if (secret === null || secret === '') return null;
  const safeMethod = request.method === 'GET' || request.method === 'HEAD';
  if (!safeMethod && request.headers[CSRF_HEADER] !== '1') {
    throw new ApiError(
      ErrorCode.forbidden,
      `a console session request with ${request.method} needs ${CSRF_HEADER}: 1`,
      {
        hint: 'the web console sends it; other clients send `Authorization: Bearer <key>` instead of the cookie',
      },
    );
  }
  if (request.headers.upgrade !== undefined && !sameOrigin(request)) {
    throw new ApiError(ErrorCode.forbidden, 'a console WebSocket must come from a page of this server', {
      hint: 'open the console from this server, or send `Authorization: Bearer <key>`',
    });
  }
  return secret;
}

/** The key secret a request authenticates with: its bearer header first, else the console session cookie. */
export function requestSecret(request: FastifyRequest): string | null {
  return bearerSecret(request.headers.authorization) ?? sessionSecret(request);
}

function sameOrigin(request: FastifyRequest): boolean {
  const origin = request.headers.origin;
  if (origin === undefined) return false;
  try {
    return new URL(origin).host === request.headers.host;
  } catch {
    return false;
  }
}

/** Set the session cookie to `secret` (HttpOnly, SameSite=Strict, Secure behind https). */
export function setSessionCookie(request: FastifyRequest, reply: FastifyReply, secret: string): void {
  const secure = request.protocol === 'https' ? '; Secure' : '';
  reply.header(
    'set-cookie',
    `${SESSION_COOKIE}=${encodeURIComponent(secret)}; Path=/; Max-Age=${SESSION_MAX_AGE_S}; HttpOnly; SameSite=Strict${secure}`,
  );
}

/** Expire the session cookie. */
export function clearSessionCookie(reply: FastifyReply): void {
  reply.header('set-cookie', `${SESSION_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict`);
}
