import {
  CopyVolumeRequestSchema,
  CreateVolumeRequestSchema,
  DeleteVolumeQuerySchema,
  ListVolumesQuerySchema,
  ResizeVolumeRequestSchema,
  VolumeListSchema,
  VolumeParamsSchema,
  VolumeSchema,
} from '@burrow/contract';
import { z } from 'zod';
import type { Services } from '../services/services.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

/** `/v1/volumes`: create, list, get, resize (grow), delete, snapshot, fork (docs/volumes.md). */
export function registerVolumeRoutes(app: ZodApp, services: Services): void {
  const tags = ['volumes'];
  app.post(
    '/volumes',
    {
      schema: {
        tags,
        summary: 'Create a volume: named storage of a fixed size that outlives sandboxes',
        body: CreateVolumeRequestSchema,
        response: { 201: VolumeSchema, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => reply.code(201).send(await services.volumes.create(principalOf(request), request.body)),
  );
  app.get(
    '/volumes',
    {
      schema: {
        tags,
        summary: 'List your volumes and volume snapshots (filters: kind, sourceId, label=k=v; cursor pagination)',
        querystring: z.object(ListVolumesQuerySchema.shape),
        response: { 200: VolumeListSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => services.volumes.list(principalOf(request), request.query),
  );
  app.get(
    '/volumes/:ref',
    {
      schema: {
        tags,
        summary: 'Get a volume by name or id, with its use and mounts',
        params: VolumeParamsSchema,
        response: { 200: VolumeSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => services.volumes.get(principalOf(request), request.params.ref),
  );
  app.post(
    '/volumes/:ref/resize',
    {
      schema: {
        tags,
        summary: 'Grow a volume (volumes never shrink)',
        params: VolumeParamsSchema,
        body: ResizeVolumeRequestSchema,
        response: { 200: VolumeSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => services.volumes.resize(principalOf(request), request.params.ref, request.body.sizeMiB),
  );
  app.delete(
    '/volumes/:ref',
    {
      schema: {
        tags,
        summary:
          'Delete a volume; refused while mounted unless force (which detaches it from stopped and paused sandboxes)',
        params: VolumeParamsSchema,
        querystring: DeleteVolumeQuerySchema,
        response: { 204: z.null(), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      await services.volumes.remove(principalOf(request), request.params.ref, { force: request.query.force });
      return reply.code(204).send(null);
    },
  );
  app.post(
    '/volumes/:ref/snapshots',
    {
      schema: {
        tags,
        summary: 'Take a read-only point-in-time snapshot of a volume (a volume of kind snapshot)',
        params: VolumeParamsSchema,
        body: CopyVolumeRequestSchema,
        response: { 201: VolumeSchema, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) =>
      reply
        .code(201)
        .send(await services.volumes.copy(principalOf(request), request.params.ref, 'snapshot', request.body)),
  );
  app.post(
    '/volumes/:ref/fork',
    {
      schema: {
        tags,
        summary: 'Fork a volume or volume snapshot into a new writable volume that diverges independently',
        params: VolumeParamsSchema,
        body: CopyVolumeRequestSchema,
        response: { 201: VolumeSchema, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) =>
      reply.code(201).send(await services.volumes.copy(principalOf(request), request.params.ref, 'fork', request.body)),
  );
}
