import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import {
  ConsoleLoginLinkSchema,
  ConsoleLoginQuerySchema,
  ConsoleSessionSchema,
  ConsoleSignInRequestSchema,
  ErrorCode,
} from '@burrow/contract';
import fastifyStatic from '@fastify/static';
import { z } from 'zod';
import type { Principal } from '../services/key-service.js';
import type { Services } from '../services/services.js';
import type { Clock } from '../util/clock.js';
import { clearSessionCookie, requestSecret, setSessionCookie } from './console-auth.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

/** Where `npm run build -w @burrow/web` writes the console (relative to this file in src/ and in dist/). */
export const DEFAULT_CONSOLE_DIR = fileURLToPath(new URL('../../../web/dist/', import.meta.url));
/** How long a login link of `burrow ui` signs in, milliseconds (5 minutes). */
export const LOGIN_LINK_TTL_MS = 5 * 60_000;
/** Login links kept at most; the oldest is dropped past it. */
const MAX_LOGIN_LINKS = 1000;

/** The console's pages may load only this server's files, and no other site may frame them. */
const CONSOLE_CSP =
  "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; " +
  "frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/** One-time login links: token → the secret of the key that asked for it. In memory: a restart voids them. */
export class LoginLinks {
  private readonly links = new Map<string, { secret: string; untilMs: number }>();
  constructor(private readonly clock: Clock) {}

  /** A new token that signs in as `secret` once, before `untilMs`. */
  issue(secret: string): { token: string; untilMs: number } {
    const token = randomBytes(32).toString('base64url');
    const untilMs = this.clock.nowMs() + LOGIN_LINK_TTL_MS;
    this.links.set(token, { secret, untilMs });
    if (this.links.size > MAX_LOGIN_LINKS) this.links.delete(this.links.keys().next().value as string);
    return { token, untilMs };
  }

  /** The secret of `token` if it is live; the token is used up either way. */
  redeem(token: string): string | null {
    const link = this.links.get(token);
    this.links.delete(token);
    return link !== undefined && link.untilMs > this.clock.nowMs() ? link.secret : null;
  }
}

/** Options of {@link registerConsole}. */
export interface ConsoleOptions {
  /** Directory of the built console (index.html, assets/). @default {@link DEFAULT_CONSOLE_DIR} */
  dir?: string;
  clock: Clock;
}

/**
 * The web console: its static files at `/` (no auth: they hold no data), sign-in with a key or a one-time link
 * (`/console/login?token=`), the session cookie and sign-out. Adds every route that needs no key to `publicRoutes`
 * (as `METHOD /url`, or `/url` for every method).
 */
export async function registerConsole(
  app: ZodApp,
  services: Services,
  publicRoutes: Set<string>,
  options: ConsoleOptions,
): Promise<void> {
  const links = new LoginLinks(options.clock);
  const dir = options.dir ?? DEFAULT_CONSOLE_DIR;
  const sessionOf = (principal: Principal) => ({
    keyId: principal.keyId,
    tenantId: principal.tenantId,
    role: principal.role,
  });
  for (const route of ['POST /v1/console/session', 'DELETE /v1/console/session', 'GET /console/login'])
    publicRoutes.add(route);

  app.post(
    '/v1/console/session',
    {
      schema: {
        tags: ['console'],
        summary: 'Sign the web console in with an API key: sets the HttpOnly session cookie',
        security: [],
        body: ConsoleSignInRequestSchema,
        response: { 200: ConsoleSessionSchema, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const principal = await services.keys.authenticate(request.body.apiKey);
      setSessionCookie(request, reply, request.body.apiKey);
      return sessionOf(principal);
    },
  );
  app.get(
    '/v1/console/session',
    {
      schema: {
        tags: ['console'],
        summary: 'Who the caller is signed in as (key id, tenant, role; never the secret)',
        response: { 200: ConsoleSessionSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => sessionOf(principalOf(request)),
  );
  app.delete(
    '/v1/console/session',
    {
      schema: {
        tags: ['console'],
        summary: 'Sign the web console out: expires the session cookie',
        security: [],
        response: { 204: z.null().describe('Signed out') },
      },
    },
    async (_request, reply) => {
      clearSessionCookie(reply);
      return reply.code(204).send(null);
    },
  );
  app.post(
    '/v1/console/login-links',
    {
      schema: {
        tags: ['console'],
        summary: 'A one-time link (5 minutes) that signs a browser in to the console as the calling key',
        response: { 201: ConsoleLoginLinkSchema, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      principalOf(request);
      const secret = requestSecret(request);
      if (secret === null) throw new Error('an authenticated request has a secret');
      const { token, untilMs } = links.issue(secret);
      return reply
        .code(201)
        .send({ path: `/console/login?token=${token}`, expiresAt: new Date(untilMs).toISOString() });
    },
  );
  app.get(
    '/console/login',
    { schema: { hide: true, querystring: ConsoleLoginQuerySchema } },
    async (request, reply) => {
      const secret = links.redeem(request.query.token);
      if (secret === null) return reply.redirect('/?signin=link-expired', 303);
      await services.keys.authenticate(secret);
      setSessionCookie(request, reply, secret);
      return reply.redirect('/', 303);
    },
  );

  if (!existsSync(`${dir}/index.html`)) {
    publicRoutes.add('GET /');
    app.get('/', { schema: { hide: true } }, async (request, reply) =>
      reply
        .code(404)
        .type('application/json')
        .send({
          error: {
            code: ErrorCode.routeNotFound,
            message: `the web console is not built (no ${dir}index.html)`,
            hint: 'run `npm run build -w @burrow/web` and restart the server',
            requestId: request.id,
          },
        }),
    );
    return;
  }
  await app.register(async (scope) => {
    scope.addHook('onRoute', (route) => {
      publicRoutes.add(route.url);
    });
    await scope.register(fastifyStatic, {
      root: dir,
      wildcard: false,
      // `/` is the route below: the plugin's own index route misses index.html with `preCompressed`.
      index: false,
      preCompressed: true,
      setHeaders: (res, path) => {
        res.header('content-security-policy', CONSOLE_CSP);
        res.header('x-content-type-options', 'nosniff');
        res.header('cache-control', path.includes('/assets/') ? 'public, max-age=31536000, immutable' : 'no-cache');
      },
    });
    scope.get('/', { schema: { hide: true } }, (_request, reply) => reply.sendFile('index.html'));
  });
}
