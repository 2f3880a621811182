import {
  ErrorCode,
  InspectSandboxQuerySchema,
  QuarantineSandboxRequestSchema,
  ResetSandboxRequestSchema,
  SandboxInspectionSchema,
  SandboxParamsSchema,
  SandboxSchema,
} from '@burrow/contract';
import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { Services } from '../services/services.js';
import { ApiError } from '../util/api-error.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

/** Sandbox sub-routes a non-admin key may still call on a quarantined sandbox (POST): reads and ways to halt it. */
const ALLOWED_WHILE_QUARANTINED = new Set(['pause', 'stop', 'snapshots', 'quarantine', 'inspect']);

/**
 * What a request would do to a quarantined sandbox, or null when it only reads (or is not about one sandbox).
 * `route` is the route pattern (`/v1/sandboxes/:id/exec`), not the URL.
 */
export function quarantineGuardedAction(method: string, route: string): string | null {
  const prefix = '/v1/sandboxes/:id';
  if (route !== prefix && !route.startsWith(`${prefix}/`)) return null;
  const rest = route.slice(prefix.length);
  const verb = rest.split('/')[1] ?? '';
  if (method === 'GET' || method === 'HEAD') {
    // WebSocket upgrades that run or feed processes.
    if (rest === '/exec/stream' || rest === '/commands/:commandId/stream') return 'exec';
    return null;
  }
  if (rest === '') return method === 'DELETE' ? 'delete' : 'update';
  if (method === 'POST' && ALLOWED_WHILE_QUARANTINED.has(verb)) return null;
  return verb === 'files' ? 'file writes' : verb;
}

/**
 * The quarantine guard: an `onRequest` hook (after authentication) that refuses with `sandbox_quarantined` every
 * call that runs code in or changes a quarantined sandbox, unless the key is an admin's.
 */
export function registerQuarantineGuard(app: ZodApp, services: Services): void {
  app.addHook('onRequest', async (request: FastifyRequest) => {
    const route = request.routeOptions.url;
    if (route === undefined || request.principal === null) return;
    const action = quarantineGuardedAction(request.method, route);
    if (action === null) return;
    const id = (request.params as { id?: unknown }).id;
    if (typeof id !== 'string' || !SandboxParamsSchema.safeParse({ id }).success) return;
    await services.hygiene.guard(request.principal, id, action);
  });
  // Time to first command: a buffered exec that answered 200 is a finished command.
  app.addHook('onResponse', async (request, reply) => {
    if (reply.statusCode !== 200 || request.routeOptions.url !== '/v1/sandboxes/:id/exec') return;
    const id = (request.params as { id?: unknown }).id;
    if (typeof id === 'string') services.metrics?.commandFinished(id, Date.now());
  });
}

/** `GET /metrics`: Prometheus text, admin keys only (the numbers name tenants). */
export function registerMetricsRoute(app: ZodApp, services: Services): void {
  app.get(
    '/metrics',
    {
      schema: {
        tags: ['meta'],
        summary: 'Prometheus metrics (text exposition format); needs an admin key',
        response: { 200: z.string(), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      if (principalOf(request).role !== 'admin') {
        throw new ApiError(ErrorCode.forbidden, 'metrics need an admin key', {
          hint: 'scrape with the admin key as a bearer token (Prometheus: authorization.credentials_file)',
        });
      }
      if (services.metrics === undefined) {
        throw new ApiError(ErrorCode.unsupported, 'this server was built without metrics', { hint: 'none' });
      }
      const { contentType, body } = await services.metrics.render();
      return reply
        .code(200)
        .type(contentType)
        .serializer((payload: unknown) => String(payload))
        .send(body);
    },
  );
}

/** Reset, quarantine, release and inspect (`/v1/sandboxes/{id}/…`). */
export function registerHygieneRoutes(app: ZodApp, services: Services): void {
  const tags = ['sandboxes'];
  app.post(
    '/sandboxes/:id/reset',
    {
      schema: {
        tags,
        summary: 'Reset to the template (fresh disk and boot) or to a named snapshot, keeping the id',
        params: SandboxParamsSchema,
        body: ResetSandboxRequestSchema,
        response: { 200: SandboxSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => services.hygiene.reset(principalOf(request), request.params.id, request.body),
  );
  app.post(
    '/sandboxes/:id/quarantine',
    {
      schema: {
        tags,
        summary: 'Quarantine: no exec, writes, commands, fork, reset or delete except by an admin key; no policies',
        params: SandboxParamsSchema,
        body: QuarantineSandboxRequestSchema.optional(),
        response: { 200: SandboxSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) =>
      services.hygiene.quarantine(principalOf(request), request.params.id, {
        reason: request.body?.reason ?? 'quarantined for inspection',
      }),
  );
  app.post(
    '/sandboxes/:id/quarantine/release',
    {
      schema: {
        tags,
        summary: 'Release a quarantined sandbox (admin key)',
        params: SandboxParamsSchema,
        response: { 200: SandboxSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => services.hygiene.release(principalOf(request), request.params.id),
  );
  app.get(
    '/sandboxes/:id/inspect',
    {
      schema: {
        tags,
        summary: 'Disk used by directory and files changed since the template; works running, paused or stopped',
        params: SandboxParamsSchema,
        querystring: InspectSandboxQuerySchema,
        response: { 200: SandboxInspectionSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => services.hygiene.inspect(principalOf(request), request.params.id, request.query),
  );
}
