import { ErrorCode, HealthSchema } from '@burrow/contract';
import fastifySwagger from '@fastify/swagger';
import fastifyWebsocket from '@fastify/websocket';
import Fastify, { type FastifyBaseLogger } from 'fastify';
import {
  jsonSchemaTransform,
  jsonSchemaTransformObject,
  serializerCompiler,
  validatorCompiler,
  type ZodTypeProvider,
} from 'fastify-type-provider-zod';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { ActorContext } from '../lifecycle/actor-context.js';
import type { Services } from '../services/services.js';
import { systemClock } from '../util/clock.js';
import { newId } from '../util/ids.js';
import { registerActivityHook } from './activity-hook.js';
import { answeredErrorCodes, registerAuditHook } from './audit-hook.js';
import { registerAuditRoutes } from './audit-routes.js';
import { registerBucketRoutes } from './bucket-routes.js';
import { registerCommandRoutes } from './command-routes.js';
import { registerCommandStreamRoutes } from './command-stream-routes.js';
import { requestSecret } from './console-auth.js';
import { registerConsole } from './console-routes.js';
import { mapError } from './error-mapping.js';
import { registerExecStreamRoutes } from './exec-stream-routes.js';
import { registerFileRoutes } from './file-routes.js';
import {
  DEFAULT_HTTP_LIMITS,
  type HttpLimits,
  registerHttpLimits,
  registerKeyRequestCap,
  serverTimeouts,
} from './http-limits.js';
import { registerHygieneRoutes, registerMetricsRoute, registerQuarantineGuard } from './hygiene-routes.js';
import { registerKeyRoutes } from './key-routes.js';
import { registerLifecycleRoutes } from './lifecycle-routes.js';
import { registerMcpRoute } from './mcp-route.js';
import { registerNetworkRoutes } from './network-routes.js';
import { registerPersistenceRoutes } from './persistence-routes.js';
import { registerPortRoutes } from './port-routes.js';
import { actingPrincipal, missingKey, TENANT_HEADER } from './principal.js';
import { registerUnknownQueryGuard } from './query-guard.js';
import { registerSandboxMetricsRoutes } from './sandbox-metrics-routes.js';
import { registerSandboxRoutes } from './sandbox-routes.js';
import { assertRouteHasAccess, registerScopeGuard } from './scope-guard.js';
import { registerSecretRoutes } from './secret-routes.js';
import { registerTemplateRoutes } from './template-routes.js';
import { registerUsageRoutes } from './usage-routes.js';
import { registerVolumeFileRoutes } from './volume-file-routes.js';
import { registerVolumeRoutes } from './volume-routes.js';
import type { ZodApp } from './zod-app.js';

/** Server version reported by `/v1/health` and the OpenAPI document. */
export const SERVER_VERSION = '0.1.0';

/** Routes that answer without an API key. */
const PUBLIC_ROUTES = new Set(['/v1/health', '/v1/openapi.json']);

/** Options of {@link buildApp}. */
export interface AppOptions {
  services: Services;
  logger: Logger;
  /** Largest JSON body, bytes. @default 16 MiB */
  bodyLimitBytes?: number;
  /** Timeouts, minimum body rate and connection caps. @default {@link DEFAULT_HTTP_LIMITS} */
  httpLimits?: HttpLimits;
  /** Names the calling key as the actor of the events a request causes (absent: events say `system`). */
  actors?: ActorContext;
  /** Record command lines in the audit log (they can carry secrets). @default false */
  auditCommandLines?: boolean;
  /** Directory of the built web console served at `/`. @default packages/web/dist */
  consoleDir?: string;
}

/**
 * The fastify app with every `/v1` route, auth, the error envelope and the OpenAPI document. Not listening.
 * @example
 * const app = await buildApp({ services, logger }); await app.ready();
 */
export async function buildApp(options: AppOptions): Promise<ZodApp> {
  const { services } = options;
  const limits = options.httpLimits ?? DEFAULT_HTTP_LIMITS;
  const app = Fastify({
    ...serverTimeouts(limits),
    loggerInstance: options.logger as FastifyBaseLogger,
    bodyLimit: options.bodyLimitBytes ?? 16 * 1024 * 1024,
    genReqId: () => newId('req'),
    // Long path parameters reach zod and get the envelope (fastify's own 414 would bypass it).
    routerOptions: { maxParamLength: 8192 },
  }).withTypeProvider<ZodTypeProvider>();
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  app.decorateRequest('principal', null);
  app.removeContentTypeParser('text/plain');
  // An empty JSON body on a route that takes none (a DELETE sent with content-type application/json) is no body.
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    if (body === '' && request.routeOptions.schema?.body === undefined) done(null, undefined);
    else parseJson(request, body as string, done);
  });

  await app.register(fastifySwagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Burrow API',
        version: SERVER_VERSION,
        description:
          'Persistent, isolated sandboxes for AI agents. Every route except /v1/health and /v1/openapi.json needs ' +
          '`Authorization: Bearer <key>`; an admin key acts for another tenant with `X-Burrow-Tenant: <tenantId>` (a ' +
          'member key only for its own). Errors carry one envelope with a stable code. Streaming exec is ' +
          'POST /v1/sandboxes/{id}/exec/stream (framed HTTP bodies) or a WebSocket at GET on the same path ' +
          '(docs/exec-protocol.md).',
      },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }],
    },
    transform: jsonSchemaTransform,
    transformObject: jsonSchemaTransformObject,
  });
  await app.register(fastifyWebsocket, { options: { maxPayload: 16 * 1024 * 1024 } });
  const actors = options.actors;
  if (actors !== undefined) {
    // Every handler runs in its caller's actor scope, so events recorded deep in the store name the key.
    app.addHook('onRoute', (route) => {
      const handler = route.handler;
      route.handler = function (this: unknown, request, reply) {
        const actor = request.principal?.keyId ?? 'anonymous';
        return actors.run({ actor }, () => handler.call(this as never, request, reply));
      };
    });
  }

  // Every route declares its scope: one missing from the table stops the build of the app.
  app.addHook('onRoute', (route) => assertRouteHasAccess(route.method, route.url));
  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id);
  });
  registerHttpLimits(app, limits);
  const publicRoutes = new Set(PUBLIC_ROUTES);
  app.addHook('onRequest', async (request) => {
    const route = request.routeOptions.url;
    if (route === undefined || publicRoutes.has(route) || publicRoutes.has(`${request.method} ${route}`)) return;
    const secret = requestSecret(request);
    if (secret === null) throw missingKey(request.headers.authorization);
    request.principal = actingPrincipal(await services.keys.authenticate(secret), request.headers[TENANT_HEADER]);
  });
  registerScopeGuard(app, services);
  registerAuditHook(app, services, { commandLines: options.auditCommandLines ?? false });
  registerKeyRequestCap(app, limits);
  registerQuarantineGuard(app, services);
  registerActivityHook(app, services);
  registerUnknownQueryGuard(app);

  app.setErrorHandler(async (error, request, reply) => {
    const mapped = mapError(error, request.id);
    answeredErrorCodes.set(request, mapped.envelope.error.code);
    // A refusal's `quota_denied` event is stored before the caller hears of the refusal (it cannot be appended in
    // the refused write's transaction, which rolls back): a crash cannot lose the event of a refusal someone saw.
    if (mapped.envelope.error.code === ErrorCode.quotaExceeded) await services.events.flush().catch(() => undefined);
    if (mapped.unexpected) request.log.error({ err: error }, 'request failed');
    else request.log.info({ code: mapped.envelope.error.code }, 'request rejected');
    return reply.code(mapped.statusCode).type('application/json').send(mapped.envelope);
  });
  app.setNotFoundHandler((request, reply) => {
    return reply
      .code(404)
      .type('application/json')
      .send({
        error: {
          code: ErrorCode.routeNotFound,
          message: `no route ${request.method} ${request.url.split('?')[0]}`,
          hint: 'see GET /v1/openapi.json for the routes',
          requestId: request.id,
        },
      });
  });

  app.get(
    '/v1/health',
    { schema: { tags: ['meta'], summary: 'Liveness and version', security: [], response: { 200: HealthSchema } } },
    async () => ({ status: 'ok' as const, version: SERVER_VERSION, runtime: services.driverName }),
  );
  app.get(
    '/v1/openapi.json',
    {
      schema: {
        tags: ['meta'],
        summary: 'This OpenAPI 3.1 document',
        security: [],
        response: { 200: z.record(z.string(), z.unknown()) },
      },
    },
    async () => app.swagger() as unknown as Record<string, unknown>,
  );

  await app.register(
    async (scope) => {
      registerSandboxRoutes(scope.withTypeProvider<ZodTypeProvider>(), services);
      registerPersistenceRoutes(scope.withTypeProvider<ZodTypeProvider>(), services);
      registerExecStreamRoutes(scope.withTypeProvider<ZodTypeProvider>(), services);
      registerCommandRoutes(scope.withTypeProvider<ZodTypeProvider>(), services);
      registerCommandStreamRoutes(scope.withTypeProvider<ZodTypeProvider>(), services);
      registerTemplateRoutes(scope.withTypeProvider<ZodTypeProvider>(), services);
      registerKeyRoutes(scope.withTypeProvider<ZodTypeProvider>(), services);
      registerLifecycleRoutes(scope.withTypeProvider<ZodTypeProvider>(), services);
      registerNetworkRoutes(scope.withTypeProvider<ZodTypeProvider>(), services);
      registerPortRoutes(scope.withTypeProvider<ZodTypeProvider>(), services.ports);
      registerSecretRoutes(scope.withTypeProvider<ZodTypeProvider>(), services);
      registerHygieneRoutes(scope.withTypeProvider<ZodTypeProvider>(), services);
      registerAuditRoutes(scope.withTypeProvider<ZodTypeProvider>(), services);
      registerUsageRoutes(scope.withTypeProvider<ZodTypeProvider>(), services);
      registerSandboxMetricsRoutes(scope.withTypeProvider<ZodTypeProvider>(), services);
      registerBucketRoutes(scope.withTypeProvider<ZodTypeProvider>(), services);
      registerVolumeRoutes(scope.withTypeProvider<ZodTypeProvider>(), services);
    },
    { prefix: '/v1' },
  );
  registerMetricsRoute(app, services);
  registerMcpRoute(app);
  await registerConsole(app, services, publicRoutes, {
    clock: systemClock,
    ...(options.consoleDir === undefined ? {} : { dir: options.consoleDir }),
  });
  // File routes get their own scope: only there is application/octet-stream accepted (streamed, not buffered).
  await app.register(
    async (scope) => {
      registerFileRoutes(scope.withTypeProvider<ZodTypeProvider>(), services);
      registerVolumeFileRoutes(scope.withTypeProvider<ZodTypeProvider>(), services);
    },
    { prefix: '/v1' },
  );
  return app;
}
