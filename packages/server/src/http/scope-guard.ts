import { ErrorCode, type KeyRestriction } from '@burrow/contract';
import type { FastifyRequest } from 'fastify';
import { ROLE_SCOPES } from '../services/key-scopes.js';
import type { Principal } from '../services/key-service.js';
import type { Services } from '../services/services.js';
import { ApiError, sandboxNotFound } from '../util/api-error.js';
import { refusedByGuard } from './audit-hook.js';
import { type RouteAccess, routeAccess } from './route-scopes.js';
import type { ZodApp } from './zod-app.js';

/** Reads the labels of a tenant's sandbox (null: no such sandbox). */
export type LabelsLookup = (tenantId: string, id: string) => Promise<Record<string, string> | null>;

/** Whether `restriction` reaches sandbox `id` of the caller's tenant. */
async function reaches(
  restriction: KeyRestriction,
  tenantId: string,
  id: string,
  labelsOf: LabelsLookup,
): Promise<boolean> {
  if (restriction.type === 'sandbox') return restriction.sandboxId === id;
  const labels = await labelsOf(tenantId, id);
  if (labels === null) return false;
  return Object.entries(restriction.labels).every(([key, value]) => labels[key] === value);
}

function describe(restriction: KeyRestriction): string {
  return restriction.type === 'sandbox'
    ? `sandbox ${restriction.sandboxId}`
    : `sandboxes labelled ${Object.entries(restriction.labels)
        .map(([k, v]) => `${k}=${v}`)
        .join(',')}`;
}

/**
 * Whether `principal` may make this call, in this order: a restricted key naming a sandbox it does not reach gets
 * `sandbox_not_found` (exactly as an unknown id: it learns nothing of other sandboxes); a viewer key calling a
 * route that changes something, a key without the route's scope, and a restricted key calling a route that names
 * no sandbox or creates one get `forbidden`.
 * @param sandboxId the route's `:id` when `access.target` is `sandbox`
 * @throws ApiError as above
 */
export async function checkAccess(
  principal: Principal,
  access: RouteAccess,
  sandboxId: string | undefined,
  labelsOf: LabelsLookup,
): Promise<void> {
  if (access.scope === 'public') return;
  const restriction = principal.restriction ?? null;
  if (restriction !== null && access.target === 'sandbox' && sandboxId !== undefined) {
    if (!(await reaches(restriction, principal.tenantId, sandboxId, labelsOf))) throw sandboxNotFound(sandboxId);
  }
  if (principal.role === 'viewer' && !access.read) {
    throw new ApiError(ErrorCode.forbidden, 'a viewer key only reads', {
      hint: 'use a member or admin key to change anything',
      details: { role: 'viewer' },
    });
  }
  const scopes = principal.scopes ?? ROLE_SCOPES[principal.role];
  if (!scopes.includes(access.scope)) {
    throw new ApiError(ErrorCode.forbidden, `this key lacks the ${access.scope} scope this call needs`, {
      hint: `create a key holding it (burrow keys create NAME --scope ${access.scope},…)`,
      details: { requiredScope: access.scope, scopes: [...scopes] },
    });
  }
  if (restriction !== null && (access.target === 'tenant' || access.creates === true)) {
    throw new ApiError(
      ErrorCode.forbidden,
      `this key reaches only ${describe(restriction)}: it cannot ${access.creates === true ? 'create sandboxes' : 'make tenant-wide calls'}`,
      { hint: 'use an unrestricted key for this call', details: { restriction } },
    );
  }
}

/**
 * The route → scope guard: an `onRequest` hook right after authentication. A route missing from the table is
 * refused (fail closed; `assertRouteHasAccess` keeps that from happening).
 */
export function registerScopeGuard(app: ZodApp, services: Services): void {
  const labelsOf: LabelsLookup = (tenantId, id) => services.sandboxes.labelsOf(tenantId, id);
  app.addHook('onRequest', async (request: FastifyRequest) => {
    const url = request.routeOptions.url;
    if (url === undefined || request.principal === null) return;
    const access = routeAccess(request.method, url);
    if (access === undefined) {
      throw new ApiError(ErrorCode.forbidden, `no scope is declared for ${request.method} ${url}`, {
        hint: 'report this: every route needs an entry in http/route-scopes.ts',
      });
    }
    const id = (request.params as { id?: unknown }).id;
    try {
      await checkAccess(request.principal, access, typeof id === 'string' ? id : undefined, labelsOf);
    } catch (error) {
      refusedByGuard.add(request);
      throw error;
    }
  });
}

/**
 * The `onRoute` check: a route without an entry in the scope table stops the server from building.
 * @throws Error naming the route
 */
export function assertRouteHasAccess(method: string | string[], url: string): void {
  for (const m of Array.isArray(method) ? method : [method]) {
    if (routeAccess(m, url) === undefined) {
      throw new Error(`route ${m} ${url} has no entry in ROUTE_ACCESS (packages/server/src/http/route-scopes.ts)`);
    }
  }
}
