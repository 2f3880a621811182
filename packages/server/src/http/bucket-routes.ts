import {
  AddBucketRequestSchema,
  BucketListSchema,
  BucketParamsSchema,
  BucketSchema,
  SandboxParamsSchema,
  SyncRequestSchema,
  SyncResultSchema,
} from '@burrow/contract';
import { z } from 'zod';
import type { Services } from '../services/services.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

/** Named bucket credentials (`/buckets`) and artifact sync (`POST /sandboxes/{id}/sync`); docs/s3.md. */
export function registerBucketRoutes(app: ZodApp, services: Services): void {
  const buckets = () => services.buckets as NonNullable<Services['buckets']>;
  app.post(
    '/buckets',
    {
      schema: {
        tags: ['buckets'],
        summary:
          "Keep named credentials of an S3 bucket for the caller's tenant (checked with HeadBucket first; the secret " +
          'is stored encrypted and never returned)',
        body: AddBucketRequestSchema,
        response: { 201: BucketSchema, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => reply.code(201).send(await buckets().add(principalOf(request).tenantId, request.body)),
  );
  app.get(
    '/buckets',
    {
      schema: {
        tags: ['buckets'],
        summary: "List the tenant's named buckets (without secrets)",
        response: { 200: BucketListSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => ({ items: await buckets().list(principalOf(request).tenantId) }),
  );
  app.delete(
    '/buckets/:name',
    {
      schema: {
        tags: ['buckets'],
        summary: 'Remove named bucket credentials (their key is destroyed)',
        params: BucketParamsSchema,
        response: { 204: z.null().describe('Removed'), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      await buckets().remove(principalOf(request).tenantId, request.params.name);
      return reply.code(204).send(null);
    },
  );
  app.post(
    '/sandboxes/:id/sync',
    {
      schema: {
        tags: ['sandboxes'],
        summary:
          'Sync a sandbox directory with a prefix of a named bucket: up, down, or both ways (newest wins; the older ' +
          'copy kept as NAME.conflict-<time>)',
        params: SandboxParamsSchema,
        body: SyncRequestSchema,
        response: { 200: SyncResultSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) =>
      (services.sync as NonNullable<Services['sync']>).sync(principalOf(request), request.params.id, request.body),
  );
}
