import { Readable } from 'node:stream';
import {
  ArchiveQuerySchema,
  ArchiveUploadResultSchema,
  ErrorCode,
  FileInfoSchema,
  FileListSchema,
  ListFilesQuerySchema,
  PathQuerySchema,
  RemoveFileQuerySchema,
  VolumeParamsSchema,
  WriteFileQuerySchema,
} from '@burrow/contract';
import { extractArchive, packDirectory, type SandboxFs } from '@burrow/runtime';
import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import { mapFsError } from '../services/file-service.js';
import type { Services } from '../services/services.js';
import { ApiError } from '../util/api-error.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { UNLIMITED_BODY_BYTES } from './http-limits.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

function rawBody(request: FastifyRequest): Readable {
  const body: unknown = request.body;
  if (body === undefined || body === null) return Readable.from([]);
  if (body instanceof Readable) return body;
  throw new ApiError(ErrorCode.invalidRequest, 'send the raw bytes, not JSON or a form', {
    hint: 'use content-type application/octet-stream (files) or application/x-tar / application/gzip (archives)',
  });
}

/** Read a request body to its end (or its failure), dropping the bytes. */
function drain(body: Readable): Promise<void> {
  if (body.readableEnded || body.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    body
      .once('end', resolve)
      .once('error', () => resolve())
      .once('close', () => resolve());
    body.resume();
  });
}

/**
 * `/v1/volumes/{ref}/files…` without a sandbox: list, stat, read, write, remove, tar in and out, resolved inside the
 * volume's root by the same {@link SandboxFs} as sandbox files (paths are absolute within the volume: `/a.txt` is
 * `a.txt` at its root). A volume snapshot is read-only: writes answer `forbidden` (EROFS). Registered in the file
 * routes' scope, where raw bodies stay streams.
 */
export function registerVolumeFileRoutes(app: ZodApp, services: Services): void {
  const tags = ['volumes'];
  const withFs = async <T>(
    request: FastifyRequest,
    ref: string,
    fn: (fs: SandboxFs) => Promise<T>,
    body?: Readable,
  ): Promise<T> => {
    try {
      return await services.volumes.withFiles(principalOf(request), ref, fn, { write: body !== undefined });
    } catch (error) {
      // The answer goes out once the body is read: a client still sending would see its connection reset.
      if (body !== undefined) await drain(body);
      throw mapFsError(error);
    }
  };
  app.get(
    '/volumes/:ref/files',
    {
      schema: {
        tags,
        summary: 'List a directory of a volume',
        params: VolumeParamsSchema,
        querystring: ListFilesQuerySchema,
        response: { 200: FileListSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => ({
      items: await withFs(request, request.params.ref, (fs) =>
        fs.list(request.query.path, { depth: request.query.depth }),
      ),
    }),
  );
  app.get(
    '/volumes/:ref/files/stat',
    {
      schema: {
        tags,
        summary: 'Metadata of one path of a volume',
        params: VolumeParamsSchema,
        querystring: PathQuerySchema,
        response: { 200: FileInfoSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => withFs(request, request.params.ref, (fs) => fs.stat(request.query.path)),
  );
  app.get(
    '/volumes/:ref/files/content',
    {
      schema: {
        tags,
        summary: 'Read a file of a volume: the raw bytes',
        params: VolumeParamsSchema,
        querystring: PathQuerySchema,
        response: { 200: z.string().describe('raw file bytes (application/octet-stream)'), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const stream = await withFs(
        request,
        request.params.ref,
        async (fs) => (await fs.openRead(request.query.path)).stream,
      );
      reply.hijack();
      reply.raw.writeHead(200, {
        'content-type': 'application/octet-stream',
        'content-length': stream.sizeBytes,
        'x-request-id': request.id,
      });
      try {
        await stream.sendTo(reply.raw);
        reply.raw.end();
      } catch (error) {
        request.log.info({ err: error }, 'volume file download ended early');
        reply.raw.destroy();
      }
      return reply;
    },
  );
  app.put(
    '/volumes/:ref/files/content',
    {
      bodyLimit: UNLIMITED_BODY_BYTES,
      schema: {
        tags,
        summary: 'Write a file of a volume from the raw body (streamed), atomically, creating missing parents',
        params: VolumeParamsSchema,
        querystring: WriteFileQuerySchema,
        response: { 200: FileInfoSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => {
      const body = rawBody(request);
      const mode = Number.parseInt(request.query.mode, 8);
      return withFs(request, request.params.ref, (fs) => fs.write(request.query.path, body, { mode }), body);
    },
  );
  app.delete(
    '/volumes/:ref/files',
    {
      schema: {
        tags,
        summary: 'Remove a file or (recursive) a directory of a volume',
        params: VolumeParamsSchema,
        querystring: RemoveFileQuerySchema,
        response: { 204: z.null(), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      await withFs(request, request.params.ref, (fs) =>
        fs.remove(request.query.path, { recursive: request.query.recursive }),
      );
      return reply.code(204).send(null);
    },
  );
  app.put(
    '/volumes/:ref/files/archive',
    {
      bodyLimit: UNLIMITED_BODY_BYTES,
      schema: {
        tags,
        summary: 'Extract a tar (gzip detected) into a directory of a volume, streamed, with the sandbox rules',
        params: VolumeParamsSchema,
        querystring: ArchiveQuerySchema,
        response: { 200: ArchiveUploadResultSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => {
      const body = rawBody(request);
      return withFs(request, request.params.ref, (fs) => extractArchive(fs, request.query.path, body), body);
    },
  );
  app.get(
    '/volumes/:ref/files/archive',
    {
      schema: {
        tags,
        summary: 'Download a directory of a volume as a tar stream (gzip=true: gzip-compressed)',
        params: VolumeParamsSchema,
        querystring: ArchiveQuerySchema,
        response: { 200: z.string().describe('tar bytes'), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const { path, gzip } = request.query;
      const stream = await withFs(request, request.params.ref, async (fs) => packDirectory(fs, path, { gzip }));
      return reply.type(gzip ? 'application/gzip' : 'application/x-tar').send(stream as unknown as string);
    },
  );
}
