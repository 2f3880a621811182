import {
  CreateSandboxRequestSchema,
  ExecRequestSchema,
  type ExecResult,
  ExecResultSchema,
  ListSandboxesQuerySchema,
  SandboxListSchema,
  SandboxParamsSchema,
  SandboxSchema,
} from '@burrow/contract';
import { z } from 'zod';
import type { Services } from '../services/services.js';
import { createFilled } from './create-from-bucket.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { execResultJson } from './exec-result-json.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

/** `/v1/sandboxes` create, list, get, delete and buffered exec. */
export function registerSandboxRoutes(app: ZodApp, services: Services): void {
  const tags = ['sandboxes'];
  app.post(
    '/sandboxes',
    {
      schema: {
        tags,
        summary: 'Create a sandbox; answers once it runs',
        body: CreateSandboxRequestSchema,
        response: { 201: SandboxSchema, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const sandbox = await createFilled(services, principalOf(request), request.body);
      return reply.code(201).send(sandbox);
    },
  );
  app.get(
    '/sandboxes',
    {
      schema: {
        tags,
        summary: 'List sandboxes (filters: state, label=k=v repeatable; cursor pagination)',
        // Same shape without the component id: @fastify/swagger cannot expand a $ref into query parameters.
        querystring: z.object(ListSandboxesQuerySchema.shape),
        response: { 200: SandboxListSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => services.sandboxes.list(principalOf(request), request.query),
  );
  app.get(
    '/sandboxes/:id',
    {
      schema: {
        tags,
        summary: 'Get a sandbox, with conditions refreshed from the host',
        params: SandboxParamsSchema,
        response: { 200: SandboxSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => services.sandboxes.get(principalOf(request), request.params.id),
  );
  app.delete(
    '/sandboxes/:id',
    {
      schema: {
        tags,
        summary: 'Delete a sandbox and verify nothing of it is left on the host',
        params: SandboxParamsSchema,
        response: { 204: z.null().describe('Deleted'), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      await services.sandboxes.remove(principalOf(request), request.params.id);
      return reply.code(204).send(null);
    },
  );
  app.post(
    '/sandboxes/:id/exec',
    {
      schema: {
        tags,
        summary: 'Run a command to completion and return its exit and output',
        params: SandboxParamsSchema,
        body: ExecRequestSchema,
        response: { 200: ExecResultSchema, ...ERROR_RESPONSES },
      },
      // The answer is ExecService's own typed ExecResult: checking it again with zod ran z.base64()'s regex over the
      // output, ~6.7 ms per MiB (up to ~100 ms at the 16 MiB cap) before the first byte went out; errors as JSON.
      serializerCompiler:
        ({ httpStatus }) =>
        (data) =>
          httpStatus === '200' ? execResultJson(data as ExecResult) : JSON.stringify(data),
    },
    async (request) => services.exec.run(principalOf(request), request.params.id, request.body),
  );
}
