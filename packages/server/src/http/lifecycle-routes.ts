import {
  CreatedWebhookSchema,
  CreateWebhookRequestSchema,
  ErrorCode,
  EventListSchema,
  KeepaliveRequestSchema,
  ListEventsQuerySchema,
  QuotaSchema,
  SandboxParamsSchema,
  SandboxSchema,
  SetQuotaRequestSchema,
  TenantDefaultsSchema,
  TenantParamsSchema,
  TenantPolicyDefaultsSchema,
  UpdateSandboxRequestSchema,
  WebhookListSchema,
  WebhookParamsSchema,
} from '@burrow/contract';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { Principal } from '../services/key-service.js';
import type { Services } from '../services/services.js';
import type { TenantDefaultsService } from '../services/tenant-defaults-service.js';
import { ApiError } from '../util/api-error.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

/** Time between SSE comment lines that keep proxies from closing an idle event stream, ms. */
const SSE_HEARTBEAT_MS = 15_000;

type EventQuery = z.infer<typeof ListEventsQuerySchema>;

/**
 * Serve the caller's events as `text/event-stream`: stored events after `Last-Event-ID` (or `cursor`) first,
 * then live ones; each as `id: <seq>`, `event: <type>`, `data: <Event JSON>`.
 */
function streamEvents(
  services: Services,
  caller: Principal,
  request: FastifyRequest,
  reply: FastifyReply,
  query: EventQuery,
): FastifyReply {
  const header = request.headers['last-event-id'];
  if (typeof header === 'string' && header !== '' && !/^\d{1,15}$/.test(header)) {
    // Ignoring it replayed every stored event from the first: a client that resumes must not get duplicates.
    throw new ApiError(
      ErrorCode.invalidRequest,
      `Last-Event-ID ${JSON.stringify(header.slice(0, 40))} is not an event id`,
      {
        hint: 'send the id: of the last event you received (digits), or no Last-Event-ID to start from the oldest',
      },
    );
  }
  const lastId = typeof header === 'string' && header !== '' ? header : query.cursor;
  const controller = new AbortController();
  reply.hijack();
  reply.raw.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    'x-accel-buffering': 'no',
    'x-request-id': request.id,
    connection: 'close',
  });
  reply.raw.write(': events\n\n');
  const heartbeat = setInterval(() => reply.raw.write(': keep-alive\n\n'), SSE_HEARTBEAT_MS);
  heartbeat.unref();
  const finish = () => {
    clearInterval(heartbeat);
    controller.abort();
    reply.raw.end();
  };
  request.raw.on('close', finish);
  reply.raw.on('close', finish);
  void (async () => {
    try {
      const filter = { sandboxId: query.sandboxId, type: query.type };
      for await (const event of services.events.stream(caller, filter, Number(lastId ?? 0), controller.signal)) {
        reply.raw.write(`id: ${event.id}\nevent: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`);
      }
    } catch (error) {
      request.log.warn({ err: error }, 'event stream failed');
    } finally {
      finish();
    }
  })();
  return reply;
}

/** Policies (`PATCH /sandboxes/{id}`, keepalive), events (list and SSE), webhooks and quotas. */
export function registerLifecycleRoutes(app: ZodApp, services: Services): void {
  app.patch(
    '/sandboxes/:id',
    {
      schema: {
        tags: ['sandboxes'],
        summary:
          'Change lifecycle policies (timeoutMs counts from now) or the default env of new commands (replaced whole); ' +
          'fields left out stay as they are',
        params: SandboxParamsSchema,
        body: UpdateSandboxRequestSchema,
        response: { 200: SandboxSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => services.policies.update(principalOf(request), request.params.id, request.body),
  );
  app.post(
    '/sandboxes/:id/keepalive',
    {
      schema: {
        tags: ['sandboxes'],
        summary: 'Count the sandbox as active (optionally for a lease) and push its TTL to now + timeoutMs',
        params: SandboxParamsSchema,
        body: KeepaliveRequestSchema.optional(),
        response: { 200: SandboxSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) =>
      services.policies.keepalive(
        principalOf(request),
        request.params.id,
        request.body ?? { durationMs: 0, extendTimeout: true },
      ),
  );

  const eventTags = ['events'];
  app.get(
    '/events',
    {
      schema: {
        tags: eventTags,
        summary:
          'Lifecycle events, oldest first after `cursor` (filters: sandboxId, type repeatable). With ' +
          '`Accept: text/event-stream` the answer is the live stream (as GET /v1/events/stream)',
        querystring: z.object(ListEventsQuerySchema.shape),
        response: { 200: EventListSchema, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const caller = principalOf(request);
      if ((request.headers.accept ?? '').includes('text/event-stream')) {
        return streamEvents(services, caller, request, reply, request.query);
      }
      return services.events.list(caller, request.query);
    },
  );
  app.get(
    '/events/stream',
    {
      schema: {
        tags: eventTags,
        summary:
          'Live events as text/event-stream (`id:` = event id, `event:` = type, `data:` = Event JSON); resumes ' +
          'after the `Last-Event-ID` header (or `cursor`), replaying stored events first',
        querystring: z.object(ListEventsQuerySchema.shape),
        response: { 200: z.string().describe('text/event-stream of Event'), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => streamEvents(services, principalOf(request), request, reply, request.query),
  );

  app.post(
    '/webhooks',
    {
      schema: {
        tags: eventTags,
        summary:
          "Register a webhook for the caller's tenant: each event is POSTed as JSON with header " +
          '`burrow-signature: t=<unix s>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`; retried with backoff',
        body: CreateWebhookRequestSchema,
        response: { 201: CreatedWebhookSchema, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) =>
      reply.code(201).send(await services.events.addWebhook(principalOf(request), request.body)),
  );
  app.get(
    '/webhooks',
    {
      schema: {
        tags: eventTags,
        summary: "The caller's tenant's webhooks with delivery counts",
        response: { 200: WebhookListSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => ({ items: await services.events.listWebhooks(principalOf(request)) }),
  );
  app.delete(
    '/webhooks/:id',
    {
      schema: {
        tags: eventTags,
        summary: 'Remove a webhook and its pending deliveries',
        params: WebhookParamsSchema,
        response: { 204: z.null().describe('Deleted'), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      await services.events.removeWebhook(principalOf(request), request.params.id);
      return reply.code(204).send(null);
    },
  );

  app.get(
    '/quota',
    {
      schema: {
        tags: ['quotas'],
        summary: "The caller's tenant's quota limits (null: unlimited) and usage",
        response: { 200: QuotaSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => services.quotas.get(principalOf(request)),
  );
  app.get(
    '/tenants/:tenant/quota',
    {
      schema: {
        tags: ['quotas'],
        summary: "A tenant's quota limits and usage (admin keys, or the tenant's own keys)",
        params: TenantParamsSchema,
        response: { 200: QuotaSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => services.quotas.get(principalOf(request), request.params.tenant),
  );
  app.put(
    '/tenants/:tenant/quota',
    {
      schema: {
        tags: ['quotas'],
        summary: "Replace a tenant's quota limits (admin keys only); a limit left out or null is unlimited",
        params: TenantParamsSchema,
        body: SetQuotaRequestSchema,
        response: { 200: QuotaSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => services.quotas.set(principalOf(request), request.params.tenant, request.body),
  );
  app.get(
    '/tenants/:tenant/defaults',
    {
      schema: {
        tags: ['quotas'],
        summary:
          "A tenant's lifecycle policy defaults: what an admin set, what a create naming no policy gets, and each one's source",
        params: TenantParamsSchema,
        response: { 200: TenantDefaultsSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => tenantDefaultsOf(services).get(principalOf(request), request.params.tenant),
  );
  app.put(
    '/tenants/:tenant/defaults',
    {
      schema: {
        tags: ['quotas'],
        summary:
          "Replace a tenant's lifecycle policy defaults (admin keys only); a field left out inherits the server default. Existing sandboxes keep their policies",
        params: TenantParamsSchema,
        body: TenantPolicyDefaultsSchema,
        response: { 200: TenantDefaultsSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => tenantDefaultsOf(services).set(principalOf(request), request.params.tenant, request.body),
  );
}

function tenantDefaultsOf(services: Services): TenantDefaultsService {
  if (services.tenantDefaults === undefined) {
    throw new ApiError(ErrorCode.unsupported, 'this server has no tenant defaults service');
  }
  return services.tenantDefaults;
}
