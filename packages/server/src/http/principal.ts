import { ErrorCode, NameSchema } from '@burrow/contract';
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

/**
 * The 401 for a request without a bearer key, saying what to send instead of what came: no header, another scheme
 * (`Basic`, as `curl -u` and browsers send), or a bearer header without a token.
 */
export function missingKey(header: string | undefined): ApiError {
  const bearer = 'send the key as `Authorization: Bearer bk_…` (the admin key is in <dataDir>/admin-key)';
  if (header === undefined || header.trim() === '')
    return new ApiError(ErrorCode.unauthorized, 'no API key', { hint: bearer });
  const scheme = /^\s*(\S+)/.exec(header)?.[1] ?? '';
  if (scheme.toLowerCase() === 'bearer') {
    return new ApiError(ErrorCode.unauthorized, 'the Authorization header names no key after `Bearer`', {
      hint: bearer,
    });
  }
  return new ApiError(
    ErrorCode.unauthorized,
    `this server takes API keys as bearer tokens, not \`${scheme}\` authorization`,
    {
      hint:
        scheme.toLowerCase() === 'basic'
          ? `${bearer}; with curl use -H 'Authorization: Bearer …' instead of -u (a key in a Basic user or password is not read)`
          : bearer,
    },
  );
}

/**
 * Request header with which a key names the tenant it acts for. An admin key may name any tenant (an operator
 * managing another tenant's sandboxes, e.g. after that tenant's last key was revoked); a member key only its own.
 */
export const TENANT_HEADER = 'x-burrow-tenant';

/**
 * The principal a request acts as: `principal` itself without a {@link TENANT_HEADER}, else the same key acting for
 * the named tenant (its role and key id unchanged, so events still name the key).
 * @param header the raw header value (an array when it was sent more than once)
 * @throws ApiError `invalid_request` for a malformed or repeated header, `forbidden` when a member key names
 *   another tenant
 */
export function actingPrincipal(principal: Principal, header: string | string[] | undefined): Principal {
  if (header === undefined) return principal;
  const parsed = NameSchema.safeParse(header);
  if (!parsed.success) {
    throw new ApiError(ErrorCode.invalidRequest, `${TENANT_HEADER} must be one tenant name`, {
      hint: 'send it once, 1-63 lowercase letters, digits or dashes starting with a letter or digit (a tenant id)',
    });
  }
  if (parsed.data === principal.tenantId) return principal;
  if (principal.role !== 'admin') {
    throw new ApiError(ErrorCode.forbidden, `acting for tenant ${parsed.data} needs an admin key`, {
      hint: `a member key acts for its own tenant (${principal.tenantId}) only: drop the ${TENANT_HEADER} header`,
    });
  }
  return { ...principal, tenantId: parsed.data };
}
