import { ApiKeyListSchema, ApiKeyParamsSchema, CreateApiKeyRequestSchema, CreatedApiKeySchema } from '@burrow/contract';
import { z } from 'zod';
import type { Services } from '../services/services.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

/** `/v1/keys`: list, create (admin), revoke (admin). */
export function registerKeyRoutes(app: ZodApp, services: Services): void {
  const tags = ['keys'];
  app.get(
    '/keys',
    {
      schema: {
        tags,
        summary: 'List API keys (admin: every tenant; member: its own tenant)',
        response: { 200: ApiKeyListSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => ({ items: await services.keys.list(principalOf(request)) }),
  );
  app.post(
    '/keys',
    {
      schema: {
        tags,
        summary: 'Create an API key (admin); the secret is shown only in this response',
        body: CreateApiKeyRequestSchema,
        response: { 201: CreatedApiKeySchema, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => reply.code(201).send(await services.keys.create(principalOf(request), request.body)),
  );
  app.delete(
    '/keys/:id',
    {
      schema: {
        tags,
        summary: 'Revoke an API key (admin)',
        params: ApiKeyParamsSchema,
        response: { 204: z.null().describe('Revoked'), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      await services.keys.revoke(principalOf(request), request.params.id);
      return reply.code(204).send(null);
    },
  );
}
