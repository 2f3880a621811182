import { SandboxParamsSchema } from '@burrow/contract';
import type { FastifyRequest } from 'fastify';
import type { Services } from '../services/services.js';
import type { ZodApp } from './zod-app.js';

/** Route pattern of one sandbox; every route under it names that sandbox in `:id`. */
const SANDBOX_ROUTE = '/v1/sandboxes/:id';

/**
 * Whether a call counts as activity on the sandbox it names (the idle clock, ARCHITECTURE "Lifecycle → Activity").
 * The rule: every call on one sandbox counts (`/v1/sandboxes/{id}/…` and `PATCH /v1/sandboxes/{id}`), whatever it
 * does (resume of a running sandbox, files, commands, exec, snapshots, keepalive), except reading the sandbox's
 * record (`GET /v1/sandboxes/{id}`: a dashboard polling it must not keep it awake) and deleting it.
 * @param route the route pattern (`/v1/sandboxes/:id/exec`), not the URL
 */
export function countsAsActivity(method: string, route: string): boolean {
  if (route === SANDBOX_ROUTE) return method === 'PATCH';
  return route.startsWith(`${SANDBOX_ROUTE}/`);
}

/** Requests whose sandbox the hook found to be the caller's (to touch it again when the answer is sent). */
const touched = new WeakSet<FastifyRequest>();

/**
 * The one place that records API activity: a `preHandler` hook (after authentication and validation, before the
 * handler, so the answer already shows the moved idle deadline) touches the sandbox of every call that
 * {@link countsAsActivity}, if the caller's tenant owns it; the end of the answer counts too (a long upload or
 * download ends later than it starts). Open streams and running commands hold the sandbox busy on their own.
 */
export function registerActivityHook(app: ZodApp, services: Services): void {
  app.addHook('preHandler', async (request) => {
    const route = request.routeOptions.url;
    if (services.activity === undefined || route === undefined || request.principal === null) return;
    if (!countsAsActivity(request.method, route)) return;
    const id = (request.params as { id?: unknown }).id;
    if (typeof id !== 'string' || !SandboxParamsSchema.safeParse({ id }).success) return;
    if (await services.sandboxes.touch(request.principal.tenantId, id)) touched.add(request);
  });
  app.addHook('onResponse', async (request) => {
    if (!touched.has(request)) return;
    const id = (request.params as { id: string }).id;
    services.activity?.touch(id);
  });
}
