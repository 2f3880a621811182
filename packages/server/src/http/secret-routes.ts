import {
  ErrorCode,
  RotateSecretRequestSchema,
  SecretListSchema,
  SecretParamsSchema,
  SecretSchema,
  SetSecretRequestSchema,
} from '@burrow/contract';
import { z } from 'zod';
import type { SecretService } from '../services/secret-service.js';
import type { Services } from '../services/services.js';
import { ApiError } from '../util/api-error.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

/** `/v1/secrets`: list, set, rotate, delete a tenant's secrets (values go in, never out). */
export function registerSecretRoutes(app: ZodApp, services: Services): void {
  const tags = ['secrets'];
  const secrets = (): SecretService => {
    if (services.secrets === undefined) {
      throw new ApiError(ErrorCode.unsupported, 'this server keeps no secrets', { hint: 'none' });
    }
    return services.secrets;
  };
  app.get(
    '/secrets',
    {
      schema: {
        tags,
        summary: "List the tenant's secrets: names, hosts, header, dates (never values)",
        response: { 200: SecretListSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => ({ items: await secrets().list(principalOf(request)) }),
  );
  app.put(
    '/secrets/:name',
    {
      schema: {
        tags,
        summary: 'Create a secret or replace it whole; requests to its hosts get the value instead of the placeholder',
        params: SecretParamsSchema,
        body: SetSecretRequestSchema,
        response: { 200: SecretSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => secrets().set(principalOf(request), request.params.name, request.body),
  );
  app.post(
    '/secrets/:name/rotate',
    {
      schema: {
        tags,
        summary: "Replace a secret's value; the next request of every sandbox holding it carries the new one",
        params: SecretParamsSchema,
        body: RotateSecretRequestSchema,
        response: { 200: SecretSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => secrets().rotate(principalOf(request), request.params.name, request.body.value),
  );
  app.delete(
    '/secrets/:name',
    {
      schema: {
        tags,
        summary: 'Delete a secret; sandboxes holding its placeholder send the placeholder from then on',
        params: SecretParamsSchema,
        response: { 204: z.null().describe('Deleted'), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      await secrets().remove(principalOf(request), request.params.name);
      return reply.code(204).send(null);
    },
  );
}
