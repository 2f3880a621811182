import { Readable } from 'node:stream';
import {
  ArchiveQuerySchema,
  ArchiveUploadResultSchema,
  BatchWriteRequestSchema,
  BatchWriteResponseSchema,
  ChmodRequestSchema,
  ErrorCode,
  ExistsResponseSchema,
  type FileInfo,
  FileInfoSchema,
  FileListSchema,
  type FileWatchEvent,
  ListFilesQuerySchema,
  MAX_BATCH_WRITE_BYTES,
  MkdirRequestSchema,
  PathQuerySchema,
  RemoveFileQuerySchema,
  RenameRequestSchema,
  SandboxParamsSchema,
  WatchQuerySchema,
  WriteFileQuerySchema,
} from '@burrow/contract';
import { extractArchive, packDirectory, watchDirectory } from '@burrow/runtime';
import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import { mapFsError } from '../services/file-service.js';
import type { Services } from '../services/services.js';
import { ApiError } from '../util/api-error.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { UNLIMITED_BODY_BYTES } from './http-limits.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

/** Interval of SSE keep-alive comments and sandbox liveness checks on a watch stream, in ms. */
const WATCH_HEARTBEAT_MS = 15_000;

/** The request body as a stream, or an empty one; refuses a body that was parsed as something else. */
function rawBody(request: FastifyRequest): Readable {
  const body: unknown = request.body;
  if (body === undefined || body === null) return Readable.from([]);
  if (body instanceof Readable) return body;
  throw new ApiError(ErrorCode.invalidRequest, 'send the raw bytes, not JSON or a form', {
    hint: 'use content-type application/octet-stream (files) or application/x-tar / application/gzip (archives)',
  });
}

/**
 * The error of a batch write whose file `index` failed: the same code, a message naming that file, and `details`
 * `{ failedIndex, failedPath, written }` (paths of the files before it, which stay written; later ones were not tried).
 */
function batchFileFailed(error: unknown, index: number, path: string, written: readonly FileInfo[]): unknown {
  const mapped = mapFsError(error);
  if (!(mapped instanceof ApiError)) return mapped;
  return new ApiError(
    mapped.code,
    `files[${index}] (${path}): ${mapped.message}; the ${index} file(s) before it were written, the rest were not`,
    {
      ...(mapped.hint === undefined ? {} : { hint: mapped.hint }),
      details: { failedIndex: index, failedPath: path, written: written.map((item) => item.path) },
      cause: error,
    },
  );
}

/**
 * `/v1/sandboxes/{id}/files…`: list, stat, exists, read, write (streamed, any size), batch write, mkdir, rename,
 * chmod, remove, tar upload/download of directories, and a watch stream (server-sent events).
 */
export function registerFileRoutes(app: ZodApp, services: Services): void {
  const tags = ['files'];
  // Raw bodies stay streams, written to the sandbox disk as they arrive.
  app.addContentTypeParser(
    ['application/octet-stream', 'application/x-tar', 'application/gzip', 'application/x-gzip'],
    (_request, payload, done) => done(null, payload),
  );

  app.get(
    '/sandboxes/:id/files',
    {
      schema: {
        tags,
        summary: 'List a directory (depth levels deep)',
        params: SandboxParamsSchema,
        querystring: ListFilesQuerySchema,
        response: { 200: FileListSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => {
      const { path, depth } = request.query;
      const items = await services.files.with(principalOf(request), request.params.id, (fs) =>
        fs.list(path, { depth }),
      );
      return { items };
    },
  );
  app.get(
    '/sandboxes/:id/files/stat',
    {
      schema: {
        tags,
        summary: 'Metadata of one path (a final symlink is reported, not followed)',
        params: SandboxParamsSchema,
        querystring: PathQuerySchema,
        response: { 200: FileInfoSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) =>
      services.files.with(principalOf(request), request.params.id, (fs) => fs.stat(request.query.path)),
  );
  app.get(
    '/sandboxes/:id/files/content',
    {
      schema: {
        tags,
        summary: 'Read a file: the raw bytes as application/octet-stream',
        params: SandboxParamsSchema,
        querystring: PathQuerySchema,
        response: { 200: z.string().describe('raw file bytes (application/octet-stream)'), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      // A pause, stop or delete ends the stream (see FileService.download).
      const stream = await services.files.download(
        principalOf(request),
        request.params.id,
        async (fs) => (await fs.openRead(request.query.path)).stream,
      );
      // Written by FileReadStream.sendTo (two reused buffers), not piped by fastify: a new buffer per chunk made V8
      // run a full GC about every 64 MiB sent (see FileReadStream). The 200 schema documents the bytes.
      reply.hijack();
      const response = reply.raw;
      response.writeHead(200, {
        'content-type': 'application/octet-stream',
        'content-length': stream.sizeBytes,
        'x-request-id': request.id,
      });
      if (request.method === 'HEAD') {
        stream.destroy();
        response.end();
        return reply;
      }
      try {
        await stream.sendTo(response);
        response.end();
      } catch (error) {
        // The status is sent: the client sees a body short of its Content-Length.
        request.log.info({ err: error }, 'file download ended early');
        response.destroy();
      }
      return reply;
    },
  );
  app.put(
    '/sandboxes/:id/files/content',
    {
      bodyLimit: UNLIMITED_BODY_BYTES,
      schema: {
        tags,
        summary:
          'Write a file from the raw request body (application/octet-stream, streamed, any size), atomically, ' +
          'creating missing parents',
        params: SandboxParamsSchema,
        querystring: WriteFileQuerySchema,
        response: { 200: FileInfoSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => {
      const body = rawBody(request);
      const mode = Number.parseInt(request.query.mode, 8);
      // A pause, stop or delete ends the upload with 409 (see FileService.upload).
      return services.files.upload(principalOf(request), request.params.id, body, (fs, source) =>
        fs.write(request.query.path, source, { mode }),
      );
    },
  );
  app.post(
    '/sandboxes/:id/files/mkdir',
    {
      schema: {
        tags,
        summary: 'Create a directory and missing parents',
        params: SandboxParamsSchema,
        body: MkdirRequestSchema,
        response: { 200: FileInfoSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) =>
      services.files.with(principalOf(request), request.params.id, (fs) => fs.mkdir(request.body.path)),
  );
  app.post(
    '/sandboxes/:id/files/rename',
    {
      schema: {
        tags,
        summary: 'Move or rename a path',
        params: SandboxParamsSchema,
        body: RenameRequestSchema,
        response: { 204: z.null().describe('Renamed'), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      await services.files.with(principalOf(request), request.params.id, (fs) =>
        fs.rename(request.body.from, request.body.to),
      );
      return reply.code(204).send(null);
    },
  );
  app.delete(
    '/sandboxes/:id/files',
    {
      schema: {
        tags,
        summary: 'Remove a file, or a directory (recursive=true for a non-empty one)',
        params: SandboxParamsSchema,
        querystring: RemoveFileQuerySchema,
        response: { 204: z.null().describe('Removed'), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const { path, recursive } = request.query;
      await services.files.with(principalOf(request), request.params.id, (fs) => fs.remove(path, { recursive }));
      return reply.code(204).send(null);
    },
  );
  app.get(
    '/sandboxes/:id/files/exists',
    {
      schema: {
        tags,
        summary: 'Whether a path exists (a dangling symlink counts)',
        params: SandboxParamsSchema,
        querystring: PathQuerySchema,
        response: { 200: ExistsResponseSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => ({
      exists: await services.files.with(principalOf(request), request.params.id, (fs) => fs.exists(request.query.path)),
    }),
  );
  app.post(
    '/sandboxes/:id/files/chmod',
    {
      schema: {
        tags,
        summary: 'Set the permission bits of a path (symlinks followed inside the sandbox)',
        params: SandboxParamsSchema,
        body: ChmodRequestSchema,
        response: { 200: FileInfoSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) =>
      services.files.with(principalOf(request), request.params.id, (fs) =>
        fs.chmod(request.body.path, Number.parseInt(request.body.mode, 8)),
      ),
  );
  app.post(
    '/sandboxes/:id/files/batch',
    {
      bodyLimit: MAX_BATCH_WRITE_BYTES,
      schema: {
        tags,
        summary: `Write several files in one call (JSON, contents inline as UTF-8 or base64; at most ${MAX_BATCH_WRITE_BYTES} bytes of body), in order, each atomically`,
        params: SandboxParamsSchema,
        body: BatchWriteRequestSchema,
        response: { 200: BatchWriteResponseSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) =>
      services.files.with(principalOf(request), request.params.id, async (fs) => {
        const items: FileInfo[] = [];
        for (const [index, file] of request.body.files.entries()) {
          const data = Buffer.from(file.content, file.encoding);
          try {
            items.push(await fs.write(file.path, data, { mode: Number.parseInt(file.mode, 8) }));
          } catch (error) {
            throw batchFileFailed(error, index, file.path, items);
          }
        }
        return { items };
      }),
  );
  app.put(
    '/sandboxes/:id/files/archive',
    {
      bodyLimit: UNLIMITED_BODY_BYTES,
      schema: {
        tags,
        summary:
          'Extract a tar (application/x-tar; gzip detected) into a directory, streamed. Entries that would leave ' +
          'the directory (.., links out), devices and FIFOs are skipped, absolute names and setuid bits ' +
          'neutralised; the answer lists each',
        params: SandboxParamsSchema,
        querystring: ArchiveQuerySchema,
        response: { 200: ArchiveUploadResultSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => {
      const body = rawBody(request);
      return services.files.upload(principalOf(request), request.params.id, body, (fs, source) =>
        extractArchive(fs, request.query.path, source),
      );
    },
  );
  app.get(
    '/sandboxes/:id/files/archive',
    {
      schema: {
        tags,
        summary:
          'Download a directory as a tar stream (application/x-tar, or application/gzip with gzip=true); ' +
          'symlinks are stored as links, never followed',
        params: SandboxParamsSchema,
        querystring: ArchiveQuerySchema,
        response: { 200: z.string().describe('tar bytes'), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const { path, gzip } = request.query;
      const stream = await services.files.download(principalOf(request), request.params.id, async (fs) =>
        packDirectory(fs, path, { gzip }),
      );
      return reply.type(gzip ? 'application/gzip' : 'application/x-tar').send(stream as unknown as string);
    },
  );
  app.get(
    '/sandboxes/:id/files/watch',
    {
      schema: {
        tags,
        summary:
          'Watch a directory: a text/event-stream of FileWatchEvent JSON objects (`data:` lines), `ready` first, ' +
          'then create / modify / delete / rename; recursive=true includes subdirectories',
        params: SandboxParamsSchema,
        querystring: WatchQuerySchema,
        response: { 200: z.string().describe('text/event-stream of FileWatchEvent'), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const caller = principalOf(request);
      const { id } = request.params;
      const queued: FileWatchEvent[] = [];
      let send = (event: FileWatchEvent) => {
        queued.push(event);
      };
      const watch = await services.files.with(caller, id, (fs) =>
        watchDirectory(fs, request.query.path, (event) => send(event), { recursive: request.query.recursive }),
      );
      reply.hijack();
      reply.raw.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache',
        'x-accel-buffering': 'no',
        'x-request-id': request.id,
        // A watch ends when either side goes; its socket is not reused.
        connection: 'close',
      });
      let open = true;
      // An open watch is activity: the sandbox is never idle while someone watches it.
      const release = services.activity?.hold(id);
      // Its directory handles would keep the sandbox's file system busy: a pause, stop or delete ends it first.
      const unhold = services.files.hold(id, async () => {
        await watch.close();
        send({ type: 'end', reason: `sandbox ${id} is pausing, stopping or being deleted` });
      });
      const finish = () => {
        if (!open) return;
        open = false;
        release?.();
        unhold();
        clearInterval(heartbeat);
        void watch.close();
        reply.raw.end();
      };
      send = (event) => {
        if (!open) return;
        reply.raw.write(`data: ${JSON.stringify(event)}\n\n`);
        if (event.type === 'end') finish();
      };
      for (const event of queued.splice(0)) send(event);
      const heartbeat = setInterval(() => {
        void services.files
          .isRunning(caller, id)
          .then((running) => {
            if (running) reply.raw.write(': keep-alive\n\n');
            else send({ type: 'end', reason: `sandbox ${id} is no longer running` });
          })
          .catch(() => send({ type: 'end', reason: `sandbox ${id} is gone` }));
      }, WATCH_HEARTBEAT_MS);
      heartbeat.unref();
      request.raw.on('close', finish);
      reply.raw.on('close', finish);
      return reply;
    },
  );
}
