import { ErrorCode } from '@burrow/contract';
import type { FastifyRequest } from 'fastify';
import type { Principal } from '../services/key-service.js';
import { ApiError } from '../util/api-error.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The authenticated caller; null on public routes. */
    principal: Principal | null;
  }
}

/**
 * The authenticated caller of `request`.
 * @throws ApiError `unauthorized` when the route was reached without authentication
 */
export function principalOf(request: FastifyRequest): Principal {
  if (request.principal === null) {
    throw new ApiError(ErrorCode.unauthorized, 'this route needs an API key', {
      hint: 'pass `Authorization: Bearer bk_…`',
    });
  }
  return request.principal;
}

/**
 * The secret of a `Bearer` authorization header.
 * @returns the secret, or null when the header is missing or not a bearer token
 */
export function bearerSecret(header: string | undefined): string | null {
  if (header === undefined) return null;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return match?.[1] ?? null;
}
