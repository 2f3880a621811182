import {
  CreateSnapshotRequestSchema,
  ForkSandboxRequestSchema,
  ForkSandboxResponseSchema,
  ListSnapshotsQuerySchema,
  SandboxParamsSchema,
  SandboxSchema,
  SnapshotListSchema,
  SnapshotParamsSchema,
  SnapshotSchema,
} from '@burrow/contract';
import { z } from 'zod';
import type { Services } from '../services/services.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

/** Pause, resume, stop, start, fork (`/v1/sandboxes/{id}/…`) and snapshots (`/v1/snapshots`). */
export function registerPersistenceRoutes(app: ZodApp, services: Services): void {
  // Resolved per request: the OpenAPI writer registers the routes without services behind them.
  const persistence = () => services.sandboxes.persistence;
  const tags = ['sandboxes'];
  const verbs = [
    ['pause', 'Pause: checkpoint processes and memory with the disk, then release CPU and RAM'],
    ['resume', 'Resume a paused sandbox under the same id, processes continuing where they were'],
    ['stop', 'Stop: end every process, keep the disk'],
    ['start', 'Start a stopped sandbox, or one in error whose runtime ended, fresh on its disk (a paused one resumes)'],
  ] as const;
  for (const [verb, summary] of verbs) {
    app.post(
      `/sandboxes/:id/${verb}`,
      { schema: { tags, summary, params: SandboxParamsSchema, response: { 200: SandboxSchema, ...ERROR_RESPONSES } } },
      async (request) => persistence()[verb](principalOf(request), request.params.id),
    );
  }
  app.post(
    '/sandboxes/:id/fork',
    {
      schema: {
        tags,
        summary: 'Fork: N new sandboxes from one checkpoint, each with its own disk copy, memory and identity',
        params: SandboxParamsSchema,
        body: ForkSandboxRequestSchema,
        response: { 201: ForkSandboxResponseSchema, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) =>
      reply.code(201).send(await persistence().fork(principalOf(request), request.params.id, request.body)),
  );
  const snapshotTags = ['snapshots'];
  app.post(
    '/sandboxes/:id/snapshots',
    {
      schema: {
        tags: snapshotTags,
        summary: 'Take a named (kept) or unnamed (deleted with the sandbox) snapshot',
        params: SandboxParamsSchema,
        body: CreateSnapshotRequestSchema,
        response: { 201: SnapshotSchema, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      // The snapshot's retention and its `snapshot_created` event commit with it (see createSnapshot).
      const snapshot = await persistence().createSnapshot(principalOf(request), request.params.id, request.body);
      return reply.code(201).send(snapshot);
    },
  );
  app.get(
    '/snapshots',
    {
      schema: {
        tags: snapshotTags,
        summary: 'List snapshots (filter: sandboxId)',
        querystring: ListSnapshotsQuerySchema,
        response: { 200: SnapshotListSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => persistence().listSnapshots(principalOf(request), request.query),
  );
  app.get(
    '/snapshots/:ref',
    {
      schema: {
        tags: snapshotTags,
        summary: 'Get a snapshot by name or id',
        params: SnapshotParamsSchema,
        response: { 200: SnapshotSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => persistence().getSnapshot(principalOf(request), request.params.ref),
  );
  app.delete(
    '/snapshots/:ref',
    {
      schema: {
        tags: snapshotTags,
        summary: 'Delete a snapshot and its bytes',
        params: SnapshotParamsSchema,
        response: { 204: z.null().describe('Deleted'), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      // The `snapshot_deleted` event commits with the row's removal (see deleteSnapshot).
      await persistence().deleteSnapshot(principalOf(request), request.params.ref);
      return reply.code(204).send(null);
    },
  );
}
