import type { FastifyRequest } from 'fastify';
import type { Services } from '../services/services.js';
import { routeAccess } from './route-scopes.js';
import type { ZodApp } from './zod-app.js';

/** The error code each refused or failed request answered with (set by the error handler). */
export const answeredErrorCodes = new WeakMap<FastifyRequest, string>();
/** Requests the scope guard refused (its 404 for a sandbox a restricted key does not reach is a refusal too). */
export const refusedByGuard = new WeakSet<FastifyRequest>();

/** Status codes that mean "refused": no or a bad key, not allowed, over a quota or rate. */
const REFUSED_STATUS = new Set([401, 403, 429]);
/** Routes whose command line `BURROW_AUDIT_COMMAND_LINES=1` records. */
const COMMAND_ROUTES = new Set([
  '/v1/sandboxes/:id/exec',
  '/v1/sandboxes/:id/exec/stream',
  '/v1/sandboxes/:id/commands',
]);

/** What a request names, from its path parameters: sandbox, key, snapshot, template, webhook or tenant. */
function targetOf(params: unknown): string | null {
  const p = (params ?? {}) as Record<string, unknown>;
  for (const name of ['id', 'ref', 'name', 'tenant']) {
    const value = p[name];
    if (typeof value === 'string' && value !== '') return value.slice(0, 128);
  }
  return null;
}

/**
 * The one place that feeds the audit log: an `onResponse` hook that records every request that changes something
 * (a route not marked read-only in the scope table) and every refused one (401, 403, 429, and the scope guard's
 * 404s), with who, from where, what, on what and how it ended. It never records bodies, file contents or secrets;
 * command lines only with `commandLines`.
 */
export function registerAuditHook(app: ZodApp, services: Services, options: { commandLines: boolean }): void {
  app.addHook('onResponse', async (request, reply) => {
    const audit = services.audit;
    const url = request.routeOptions.url;
    if (audit === undefined || url === undefined) return;
    const access = routeAccess(request.method, url);
    const status = reply.statusCode;
    const refused = REFUSED_STATUS.has(status) || refusedByGuard.has(request);
    const changes = access !== undefined && access.scope !== 'public' && !access.read;
    if (!refused && !changes) return;
    const principal = request.principal;
    let details: Record<string, unknown> | null = null;
    if (options.commandLines && COMMAND_ROUTES.has(url) && request.method === 'POST') {
      const cmd = (request.body as { cmd?: unknown } | undefined)?.cmd;
      if (cmd !== undefined) details = { cmd };
    }
    audit.record({
      tenantId: principal?.tenantId ?? null,
      keyId: principal?.keyId ?? null,
      keyName: principal?.keyName ?? null,
      sourceAddress: request.ip,
      requestId: request.id,
      action: `${request.method} ${url}`,
      target: targetOf(request.params),
      result: refused ? 'refused' : status < 400 ? 'ok' : 'failed',
      status,
      errorCode: answeredErrorCodes.get(request) ?? null,
      details,
    });
  });
}
