import { ErrorCode } from '@burrow/contract';
import { z } from 'zod';
import { ApiError } from '../util/api-error.js';
import type { ZodApp } from './zod-app.js';

/**
 * The query parameter names a route's `querystring` schema defines: the keys of a zod object (looking through
 * pipes), none when the route has no query schema, or null when the schema's keys cannot be known (then nothing is
 * refused).
 */
export function definedQueryKeys(schema: unknown): Set<string> | null {
  if (schema === undefined || schema === null) return new Set();
  if (schema instanceof z.ZodObject) return new Set(Object.keys(schema.shape));
  if (schema instanceof z.ZodPipe) return definedQueryKeys(schema.in);
  return null;
}

/**
 * Refuse query parameters a route does not define, with `invalid_request` naming them and the ones it accepts.
 * Before this, a typo such as `GET /v1/sandboxes?lable=a=b` was ignored and listed every sandbox. One hook for every
 * route (REST and WebSocket upgrades alike); it runs after authentication, before the route's own validation.
 */
export function registerUnknownQueryGuard(app: ZodApp): void {
  app.addHook('preValidation', async (request) => {
    if (request.routeOptions.url === undefined) return;
    const keys = Object.keys((request.query ?? {}) as Record<string, unknown>);
    if (keys.length === 0) return;
    const defined = definedQueryKeys(request.routeOptions.schema?.querystring);
    if (defined === null) return;
    const unknown = keys.filter((key) => !defined.has(key));
    if (unknown.length === 0) return;
    const names = unknown.map((key) => `'${key.slice(0, 64)}'`).join(', ');
    throw new ApiError(
      ErrorCode.invalidRequest,
      `unknown query parameter${unknown.length > 1 ? 's' : ''} ${names} for ${request.method} ${request.routeOptions.url}`,
      {
        hint:
          defined.size > 0
            ? `this endpoint accepts: ${[...defined].join(', ')}`
            : 'this endpoint takes no query parameters: remove them',
        details: { location: 'querystring', unknown: unknown.slice(0, 20).map((key) => key.slice(0, 64)) },
      },
    );
  });
}
