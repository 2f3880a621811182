import { Readable, Transform, type TransformCallback } from 'node:stream';
import {
  ErrorCode,
  FileInfoSchema,
  FileListSchema,
  ListFilesQuerySchema,
  MAX_FILE_UPLOAD_BYTES,
  MkdirRequestSchema,
  PathQuerySchema,
  RemoveFileQuerySchema,
  RenameRequestSchema,
  SandboxParamsSchema,
  WriteFileQuerySchema,
} from '@burrow/contract';
import { z } from 'zod';
import type { Services } from '../services/services.js';
import { ApiError } from '../util/api-error.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

function tooLarge(): ApiError {
  return new ApiError(ErrorCode.payloadTooLarge, `file uploads are limited to ${MAX_FILE_UPLOAD_BYTES} bytes`, {
    hint: 'split the file, or copy it in from inside the sandbox (curl, git)',
  });
}

/** Passes bytes through and fails once more than `limitBytes` went by. */
export class ByteLimit extends Transform {
  private seen = 0;
  constructor(private readonly limitBytes: number) {
    super();
  }
  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.seen += chunk.length;
    if (this.seen > this.limitBytes) callback(tooLarge());
    else callback(null, chunk);
  }
}

/** `/v1/sandboxes/{id}/files…`: list, stat, read, write (streamed octet-stream), mkdir, rename, remove. */
export function registerFileRoutes(app: ZodApp, services: Services): void {
  const tags = ['files'];
  // The body stays a stream; the route enforces the size limit while writing.
  app.addContentTypeParser('application/octet-stream', (_request, payload, done) => done(null, payload));

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
      const { stream, sizeBytes } = await services.files.with(principalOf(request), request.params.id, (fs) =>
        fs.openRead(request.query.path),
      );
      // A stream is sent as is (fastify serializes only plain values); the 200 schema documents the bytes.
      return reply
        .type('application/octet-stream')
        .header('content-length', sizeBytes)
        .send(stream as unknown as string);
    },
  );
  app.put(
    '/sandboxes/:id/files/content',
    {
      bodyLimit: MAX_FILE_UPLOAD_BYTES,
      schema: {
        tags,
        summary: 'Write a file from the raw request body (application/octet-stream), creating missing parents',
        params: SandboxParamsSchema,
        querystring: WriteFileQuerySchema,
        response: { 200: FileInfoSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => {
      const body: unknown = request.body;
      let data: Buffer | Readable;
      if (body === undefined || body === null) data = Buffer.alloc(0);
      else if (body instanceof Readable) data = body;
      else {
        throw new ApiError(ErrorCode.invalidRequest, 'file contents must be sent as application/octet-stream', {
          hint: 'send the raw bytes with content-type application/octet-stream',
        });
      }
      const declared = Number(request.headers['content-length'] ?? 0);
      if (declared > MAX_FILE_UPLOAD_BYTES) throw tooLarge();
      const limited = data instanceof Readable ? data.pipe(new ByteLimit(MAX_FILE_UPLOAD_BYTES)) : data;
      if (data instanceof Readable && limited instanceof Transform) {
        data.on('error', (error) => limited.destroy(error));
      }
      const mode = Number.parseInt(request.query.mode, 8);
      return services.files.with(principalOf(request), request.params.id, (fs) =>
        fs.write(request.query.path, limited, { mode }),
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
}
