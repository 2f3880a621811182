import { createHash, timingSafeEqual } from 'node:crypto';
import { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { E2bFilesQuerySchema, E2bFilesystemRequests, E2bProcessRequests } from '@burrow/contract';
import fastifyMultipart from '@fastify/multipart';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import type { Services } from '../../services/services.js';
import type { SandboxRecord } from '../../store/sandbox-store.js';
import { newId } from '../../util/ids.js';
import {
  ConnectError,
  connectTimeoutMs,
  decodeEnvelope,
  openStream,
  parseMessage,
  sendUnaryError,
} from './connect-protocol.js';
import { toConnectError } from './e2b-errors.js';
import type { E2bSandboxDefaults } from './e2b-tokens.js';
import { EnvdFilesystem } from './envd-filesystem.js';
import { type EnvdContext, EnvdProcessAdapter } from './envd-process-adapter.js';

/** Options of {@link buildEnvdApp}. */
export interface EnvdAppOptions {
  services: Services;
  logger: Logger;
  /** A sandbox row by id across tenants (null: no such sandbox). */
  lookup: (id: string) => Promise<SandboxRecord | null>;
  /** Running sandboxes, to find the sandbox of a signed URL that names none. */
  listRunning: () => Promise<SandboxRecord[]>;
  /** The envd access token of a sandbox. */
  accessToken: (sandboxId: string) => string;
  /** The default user and working directory of a sandbox's calls. */
  defaults: E2bSandboxDefaults;
  /** Largest upload, bytes. @default 1 GiB */
  uploadLimitBytes?: number;
}

/** Unary RPCs: `/<package>.<Service>/<Method>`. */
type UnaryHandler = (ctx: EnvdContext, message: unknown) => Promise<unknown>;

/**
 * The in-sandbox daemon of E2B ("envd") served by the host for every sandbox on one listener: requests name their
 * sandbox in `E2b-Sandbox-Id` and carry its `X-Access-Token` (or a signed URL for `/files`). Connect RPCs of
 * `process.Process` and `filesystem.Filesystem`, `GET/POST /files`, `GET /health`.
 * Not listening; the caller listens on `BURROW_E2B_ENVD_PORT`.
 */
export async function buildEnvdApp(options: EnvdAppOptions): Promise<FastifyInstance> {
  const { services } = options;
  const app = Fastify({
    loggerInstance: options.logger as FastifyBaseLogger,
    bodyLimit: 32 * 1024 * 1024,
    genReqId: () => newId('req'),
  });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => {
    try {
      done(null, body === '' ? {} : JSON.parse(body as string));
    } catch {
      done(null, { __invalidJson: true });
    }
  });
  app.addContentTypeParser('application/connect+json', { parseAs: 'buffer' }, (_request, body, done) =>
    done(null, body),
  );
  app.addContentTypeParser('*', (_request, payload, done) => done(null, payload));
  await app.register(fastifyMultipart, {
    // A part's filename is the file's path in the sandbox: keep its directories.
    preservePath: true,
    limits: { fileSize: options.uploadLimitBytes ?? 1024 * 1024 * 1024, files: 1000 },
  });

  const processes = new EnvdProcessAdapter(services);
  const filesystem = new EnvdFilesystem(services);

  /** The sandbox a request names, or an E2B-shaped error already sent. */
  const sandboxOf = async (request: FastifyRequest, reply: FastifyReply): Promise<SandboxRecord | null> => {
    const id = header(request, 'e2b-sandbox-id');
    if (id === undefined) {
      await plainError(reply, 400, 'the E2b-Sandbox-Id header names the sandbox');
      return null;
    }
    const record = await options.lookup(id);
    if (record === null || record.state !== 'running') {
      await plainError(reply, 502, `The sandbox ${id} was not found or is not running`);
      return null;
    }
    return record;
  };

  const contextOf = async (record: SandboxRecord, request: FastifyRequest, user?: string): Promise<EnvdContext> => {
    const defaults = await options.defaults.of(record);
    const name = user ?? basicUser(request) ?? defaults.user;
    return {
      caller: { keyId: 'e2b-envd', tenantId: record.tenantId, role: 'member' },
      sandboxId: record.id,
      user: name,
      cwd: name === defaults.user ? defaults.cwd : name === 'root' || name === undefined ? '/root' : `/home/${name}`,
    };
  };

  const authorized = (record: SandboxRecord, request: FastifyRequest): boolean => {
    const token = header(request, 'x-access-token');
    return token !== undefined && safeEqual(token, options.accessToken(record.id));
  };

  app.get('/health', async (request, reply) => {
    const id = header(request, 'e2b-sandbox-id');
    const record = id === undefined ? null : await options.lookup(id);
    if (record === null || record.state !== 'running') return plainError(reply, 502, 'the sandbox is not running');
    return reply.code(204).send();
  });

  const unary: Record<string, UnaryHandler> = {
    'process.Process/List': (ctx) => processes.list(ctx),
    'process.Process/SendInput': async (ctx, m) => {
      await processes.sendInput(ctx, parseMessage(E2bProcessRequests.SendInput, m));
      return {};
    },
    'process.Process/SendSignal': async (ctx, m) => {
      await processes.sendSignal(ctx, parseMessage(E2bProcessRequests.SendSignal, m));
      return {};
    },
    'process.Process/CloseStdin': async (ctx, m) => {
      await processes.closeStdin(ctx, parseMessage(E2bProcessRequests.CloseStdin, m).process);
      return {};
    },
    'process.Process/Update': async (ctx, m) => {
      await processes.update(ctx, parseMessage(E2bProcessRequests.Update, m));
      return {};
    },
    'filesystem.Filesystem/Stat': (ctx, m) => filesystem.stat(ctx, parseMessage(E2bFilesystemRequests.Stat, m)),
    'filesystem.Filesystem/MakeDir': (ctx, m) =>
      filesystem.makeDir(ctx, parseMessage(E2bFilesystemRequests.MakeDir, m)),
    'filesystem.Filesystem/Move': (ctx, m) => filesystem.move(ctx, parseMessage(E2bFilesystemRequests.Move, m)),
    'filesystem.Filesystem/ListDir': (ctx, m) =>
      filesystem.listDir(ctx, parseMessage(E2bFilesystemRequests.ListDir, m)),
    'filesystem.Filesystem/Remove': (ctx, m) => filesystem.remove(ctx, parseMessage(E2bFilesystemRequests.Remove, m)),
    'filesystem.Filesystem/CreateWatcher': (ctx, m) =>
      filesystem.createWatcher(ctx, parseMessage(E2bFilesystemRequests.CreateWatcher, m)),
    'filesystem.Filesystem/GetWatcherEvents': (ctx, m) =>
      filesystem.watcherEvents(ctx, parseMessage(E2bFilesystemRequests.GetWatcherEvents, m)),
    'filesystem.Filesystem/RemoveWatcher': (ctx, m) =>
      filesystem.removeWatcher(ctx, parseMessage(E2bFilesystemRequests.RemoveWatcher, m)),
  };
  const streams = new Set(['process.Process/Start', 'process.Process/Connect', 'filesystem.Filesystem/WatchDir']);

  app.post('/:service/:method', async (request, reply) => {
    const { service, method } = request.params as { service: string; method: string };
    const name = `${service}/${method}`;
    const record = await sandboxOf(request, reply);
    if (record === null) return reply;
    if (!authorized(record, request)) {
      return sendUnaryError(reply, new ConnectError('unauthenticated', 'invalid or missing X-Access-Token'));
    }
    const ctx = await contextOf(record, request);
    if (streams.has(name)) {
      let message: unknown;
      try {
        message = decodeEnvelope(Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0));
      } catch (error) {
        return sendUnaryError(reply, toConnectError(error));
      }
      const stream = openStream(request, reply);
      try {
        if (name === 'process.Process/Start') {
          await processes.start(
            ctx,
            parseMessage(E2bProcessRequests.Start, message),
            stream,
            connectTimeoutMs(request),
          );
        } else if (name === 'process.Process/Connect') {
          await processes.connect(ctx, parseMessage(E2bProcessRequests.Connect, message).process, stream);
        } else {
          await filesystem.watchDir(ctx, parseMessage(E2bFilesystemRequests.WatchDir, message), stream);
        }
      } catch (error) {
        const mapped = toConnectError(error);
        if (mapped.code === 'internal') request.log.error({ err: error }, 'envd stream failed');
        stream.end(mapped);
      }
      return reply;
    }
    const handler = unary[name];
    if (handler === undefined) {
      return sendUnaryError(reply, new ConnectError('unimplemented', `${name} is not implemented by Burrow's envd`));
    }
    if ((request.body as { __invalidJson?: boolean } | undefined)?.__invalidJson) {
      return sendUnaryError(reply, new ConnectError('invalid_argument', 'the request body is not JSON'));
    }
    try {
      return reply.type('application/json').send(await handler(ctx, request.body));
    } catch (error) {
      const mapped = toConnectError(error);
      if (mapped.code === 'internal') request.log.error({ err: error }, 'envd call failed');
      return sendUnaryError(reply, mapped);
    }
  });

  /** The sandbox and context of a `/files` call: access token, or a valid signature. */
  const filesAccess = async (
    request: FastifyRequest,
    reply: FastifyReply,
    operation: 'read' | 'write',
  ): Promise<{ ctx: EnvdContext; path: string } | null> => {
    const query = E2bFilesQuerySchema.safeParse(request.query);
    if (!query.success) return plainError(reply, 400, 'invalid query: path, username, signature').then(() => null);
    const q = query.data;
    const now = Math.floor(Date.now() / 1000);
    let record: SandboxRecord | null = null;
    if (header(request, 'x-access-token') !== undefined || q.signature === undefined) {
      record = await sandboxOf(request, reply);
      if (record === null) return null;
      if (!authorized(record, request))
        return plainError(reply, 401, 'invalid or missing access token').then(() => null);
    } else {
      if (q.signature_expiration !== undefined && q.signature_expiration < now) {
        return plainError(reply, 401, 'signature is already expired').then(() => null);
      }
      const id = header(request, 'e2b-sandbox-id');
      const candidates = id === undefined ? await options.listRunning() : [await options.lookup(id)];
      const sign = (r: SandboxRecord) =>
        `v1_${createHash('sha256')
          .update(
            `${q.path ?? ''}:${operation}:${q.username ?? ''}:${options.accessToken(r.id)}${
              q.signature_expiration === undefined ? '' : `:${q.signature_expiration}`
            }`,
          )
          .digest('base64')
          .replace(/=+$/, '')}`;
      record =
        candidates.find((r) => r !== null && r.state === 'running' && safeEqual(sign(r), q.signature ?? '')) ?? null;
      if (record === null) return plainError(reply, 401, 'invalid signature').then(() => null);
    }
    const ctx = await contextOf(record, request, q.username === '' ? undefined : q.username);
    return { ctx, path: q.path ?? '' };
  };

  app.get('/files', async (request, reply) => {
    const access = await filesAccess(request, reply, 'read');
    if (access === null) return reply;
    const gzip = /\bgzip\b/.test(header(request, 'accept-encoding') ?? '');
    try {
      const stream = await filesystem.openRead(access.ctx, access.path);
      const sizeBytes = stream.sizeBytes;
      reply.hijack();
      const raw = reply.raw;
      if (gzip) {
        raw.writeHead(200, { 'content-type': 'application/octet-stream', 'content-encoding': 'gzip' });
        const { createGzip } = await import('node:zlib');
        const zip = createGzip();
        zip.pipe(raw);
        await stream.sendTo(zip);
        zip.end();
      } else {
        raw.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': sizeBytes });
        await stream.sendTo(raw);
        raw.end();
      }
    } catch (error) {
      if (reply.sent || reply.raw.headersSent) {
        reply.raw.destroy();
        return reply;
      }
      const mapped = toConnectError(error);
      return plainError(reply, httpStatusOf(mapped), mapped.message);
    }
    return reply;
  });

  app.post('/files', async (request, reply) => {
    const access = await filesAccess(request, reply, 'write');
    if (access === null) return reply;
    const metadata = metadataOf(request);
    try {
      const written: unknown[] = [];
      if (request.isMultipart()) {
        for await (const part of request.parts()) {
          if (part.type === 'file') {
            const target = part.filename || access.path;
            written.push(await filesystem.write(access.ctx, target, part.file, metadata));
          } else if (part.fieldname === 'file') {
            // A form field without a filename: its value is the content of the file `path` names.
            const value = Readable.from([Buffer.from(String(part.value))]);
            written.push(await filesystem.write(access.ctx, access.path, value, metadata));
          }
        }
      } else {
        if (access.path === '') return plainError(reply, 400, 'the path query parameter names the file');
        let body = request.body as Readable;
        if (!(body instanceof Readable)) body = Readable.from([]);
        if (/\bgzip\b/.test(header(request, 'content-encoding') ?? '')) body = body.pipe(createGunzip());
        written.push(await filesystem.write(access.ctx, access.path, body, metadata));
      }
      return reply.type('application/json').send(written);
    } catch (error) {
      const mapped = toConnectError(error);
      if (mapped.code === 'internal') request.log.error({ err: error }, 'envd upload failed');
      return plainError(reply, httpStatusOf(mapped), mapped.message);
    }
  });

  app.setNotFoundHandler((request, reply) => plainError(reply, 404, `no route ${request.method} ${request.url}`));
  app.setErrorHandler((error, request, reply) => {
    const status = (error as { statusCode?: number }).statusCode ?? 500;
    if (status >= 500) request.log.error({ err: error }, 'envd request failed');
    return plainError(reply, status, (error as Error).message);
  });
  return app;
}

/** `{code, message}` with an HTTP status, the shape of envd's plain HTTP errors. */
async function plainError(reply: FastifyReply, status: number, message: string): Promise<FastifyReply> {
  reply.code(status).type('application/json').send({ code: status, message });
  return reply;
}

/** The HTTP status of a Connect error on the plain `/files` routes. */
function httpStatusOf(error: ConnectError): number {
  if (error.code === 'not_found') return 404;
  if (error.code === 'invalid_argument' || error.code === 'failed_precondition') return 400;
  if (error.code === 'unauthenticated') return 401;
  if (error.code === 'resource_exhausted') return 507;
  if (error.code === 'unavailable') return 502;
  return 500;
}

function header(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** The user of `Authorization: Basic base64("<user>:")`, if any. */
function basicUser(request: FastifyRequest): string | undefined {
  const auth = header(request, 'authorization');
  if (auth === undefined || !auth.startsWith('Basic ')) return undefined;
  const user = Buffer.from(auth.slice(6), 'base64').toString('utf8').split(':')[0];
  return user === undefined || user === '' ? undefined : user;
}

/** `X-Metadata-<key>` headers, keys lowercased. */
function metadataOf(request: FastifyRequest): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(request.headers)) {
    if (!name.startsWith('x-metadata-') || value === undefined) continue;
    out[name.slice('x-metadata-'.length)] = Array.isArray(value) ? (value[0] ?? '') : value;
  }
  return out;
}

function safeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}
