import {
  E2bConnectSchema,
  E2bCreateSandboxSchema,
  E2bForkSchema,
  E2bListQuerySchema,
  E2bNetworkUpdateSchema,
  E2bPauseSchema,
  E2bSnapshotListQuerySchema,
  E2bSnapshotSchema,
  E2bTimeoutSchema,
  EnvSchema,
  ERROR_HTTP_STATUS,
  ErrorCode,
  LabelsSchema,
  type Sandbox,
} from '@burrow/contract';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import type { z } from 'zod';
import { hasFullRights } from '../../services/key-scopes.js';
import type { Principal } from '../../services/key-service.js';
import type { Services } from '../../services/services.js';
import { E2B_BASE_TEMPLATE } from '../../services/template-service.js';
import { ApiError } from '../../util/api-error.js';
import { newId } from '../../util/ids.js';
import { E2bError } from './e2b-errors.js';
import { e2bNetworkView, networkFromE2bCreate, networkFromE2bUpdate } from './e2b-network.js';

/** Version of envd Burrow's envd answers as: the SDKs gate features on it. */
export const E2B_ENVD_VERSION = '0.6.13';
/** Most sandboxes one E2B list call looks at. */
const MAX_LISTED = 10_000;
/** E2B's default sandbox timeout, seconds. */
const DEFAULT_TIMEOUT_S = 300;

/** Options of {@link buildE2bApiApp}. */
export interface E2bApiAppOptions {
  services: Services;
  logger: Logger;
  /** The envd access token of a sandbox. */
  accessToken: (sandboxId: string) => string;
}

/**
 * E2B's control plane (its REST API, v1 and v2 routes) over Burrow's services: an E2B sandbox is a Burrow sandbox
 * (`burrow sandbox ls` lists it), `metadata` are labels, `timeout` is the TTL policy (`autoPause` makes it pause),
 * E2B snapshots are Burrow snapshots. Keys come in `X-API-KEY`. Options Burrow cannot honour are refused with 400.
 * Not listening; the caller listens on `BURROW_E2B_API_PORT`.
 */
export async function buildE2bApiApp(options: E2bApiAppOptions): Promise<FastifyInstance> {
  const { services, accessToken } = options;
  const app = Fastify({
    loggerInstance: options.logger as FastifyBaseLogger,
    bodyLimit: 1024 * 1024,
    genReqId: () => newId('req'),
  });
  app.removeContentTypeParser('text/plain');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => {
    if (body === '') return done(null, undefined);
    try {
      done(null, JSON.parse(body as string));
    } catch {
      done(new E2bError(400, 'the request body is not JSON'), undefined);
    }
  });
  app.decorateRequest('e2bCaller', null);
  app.addHook('onRequest', async (request) => {
    const key = request.headers['x-api-key'];
    if (typeof key !== 'string' || key === '') throw new E2bError(401, 'missing X-API-KEY header');
    const principal = await services.keys.authenticate(key).catch(() => {
      throw new E2bError(401, 'Invalid API key');
    });
    // The E2B routes have no scope table: only a key with its role's full rights over its whole tenant may use them.
    if (!hasFullRights(principal)) {
      throw new E2bError(403, 'a scoped, restricted or viewer key works on the Burrow API only, not the E2B one');
    }
    (request as unknown as { e2bCaller: Principal }).e2bCaller = principal;
  });
  app.setErrorHandler((error, request, reply) => {
    const { status, message } = toE2bError(error);
    if (status >= 500) request.log.error({ err: error }, 'E2B API request failed');
    return reply.code(status).type('application/json').send({ code: status, message });
  });
  app.setNotFoundHandler((request, reply) =>
    reply.code(404).send({ code: 404, message: `no route ${request.method} ${request.url.split('?')[0]}` }),
  );

  const caller = (request: FastifyRequest) => (request as unknown as { e2bCaller: Principal }).e2bCaller;
  const idOf = (request: FastifyRequest) => (request.params as { id: string }).id;
  const view = (s: Sandbox) => toE2bSandbox(s, accessToken(s.id));

  const create = async (request: FastifyRequest, reply: FastifyReply) => {
    const body = parse(E2bCreateSandboxSchema, request.body ?? {});
    refuseUnsupported(body);
    const network = networkFromE2bCreate(body.allow_internet_access, body.network);
    const who = caller(request);
    const snapshot = await services.sandboxes.persistence.getSnapshot(who, body.templateID).catch(() => null);
    const template = snapshot === null ? await templateFor(services, who, body.templateID) : snapshot.template;
    const timeoutS = body.timeout ?? DEFAULT_TIMEOUT_S;
    const created = await services.sandboxes.create(who, {
      template,
      env: parse(EnvSchema, body.envVars ?? {}),
      cwd: template === E2B_BASE_TEMPLATE ? '/home/user' : '/root',
      labels: parse(LabelsSchema, body.metadata ?? {}),
      timeoutMs: Math.max(1000, timeoutS * 1000),
      timeoutAction: body.autoPause === true ? (body.autoPauseMemory === false ? 'stop' : 'pause') : 'delete',
      autoResume: body.autoResume?.enabled ?? false,
      ...(network === undefined ? {} : { network }),
      ...(snapshot === null ? {} : { fromSnapshot: snapshot.id }),
    });
    return reply.code(201).send(view(created));
  };
  app.post('/sandboxes', create);
  app.post('/v2/sandboxes', create);

  /**
   * E2B's list: the matching sandboxes (labels from `metadata`, states, `startedAfter`, `template`), ordered by start
   * (`order`, newest first by default), a page of `limit`; `X-Next-Token` carries the next page's offset.
   */
  const list = async (request: FastifyRequest, reply: FastifyReply) => {
    const query = parse(E2bListQuerySchema, request.query);
    const states = (Array.isArray(query.state) ? query.state : (query.state ?? 'running,paused').split(','))
      .flatMap((s) => s.split(','))
      .filter((s) => s !== '');
    for (const s of states) if (s !== 'running' && s !== 'paused') throw new E2bError(400, `unknown state ${s}`);
    const offset = query.nextToken === undefined ? 0 : Number(Buffer.from(query.nextToken, 'base64url').toString());
    if (!Number.isInteger(offset) || offset < 0) throw new E2bError(400, 'nextToken is not valid: pass it unchanged');
    const labels = [...new URLSearchParams(query.metadata ?? '').entries()].map(([k, v]) => `${k}=${v}`);
    const afterMs = query.startedAfter === undefined ? null : Date.parse(query.startedAfter);
    if (afterMs !== null && Number.isNaN(afterMs)) throw new E2bError(400, 'startedAfter must be an ISO-8601 time');
    const matching: Sandbox[] = [];
    let cursor: string | undefined;
    do {
      const page = await services.sandboxes.list(caller(request), {
        label: labels,
        limit: 200,
        ...(cursor === undefined ? {} : { cursor }),
      });
      for (const s of page.items) {
        if (!states.includes(e2bState(s))) continue;
        if (afterMs !== null && Date.parse(s.createdAt) < afterMs) continue;
        if (query.template !== undefined && listItem(s).templateID !== query.template) continue;
        matching.push(s);
      }
      cursor = page.nextCursor ?? undefined;
    } while (cursor !== undefined && matching.length < MAX_LISTED);
    matching.sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
    if (query.order !== 'asc') matching.reverse();
    const limit = query.limit ?? 100;
    const page = matching.slice(offset, offset + limit);
    if (offset + limit < matching.length) {
      reply.header('x-next-token', Buffer.from(String(offset + limit)).toString('base64url'));
    }
    return page.map(listItem);
  };
  app.get('/sandboxes', list);
  app.get('/v2/sandboxes', list);

  app.get('/sandboxes/:id', async (request) => {
    const s = await services.sandboxes.get(caller(request), idOf(request));
    return { ...listItem(s), ...view(s), ...e2bNetworkView(s.network), lifecycle: lifecycleOf(s) };
  });

  app.delete('/sandboxes/:id', async (request, reply) => {
    await services.sandboxes.remove(caller(request), idOf(request));
    return reply.code(204).send();
  });

  app.post('/sandboxes/:id/timeout', async (request, reply) => {
    const body = parse(E2bTimeoutSchema, request.body ?? {});
    await services.policies.update(caller(request), idOf(request), { timeoutMs: Math.max(1000, body.timeout * 1000) });
    return reply.code(204).send();
  });

  app.post('/sandboxes/:id/refreshes', async (request, reply) => {
    const body = parse(E2bConnectSchema, request.body);
    await extendTo(caller(request), idOf(request), body?.timeout ?? DEFAULT_TIMEOUT_S);
    return reply.code(204).send();
  });

  app.post('/sandboxes/:id/pause', async (request, reply) => {
    const body = parse(E2bPauseSchema, request.body);
    const who = caller(request);
    const id = idOf(request);
    const current = await services.sandboxes.get(who, id);
    if (current.state === 'paused' || current.state === 'stopped')
      throw new E2bError(409, `sandbox ${id} is already paused`);
    if (body?.memory === false) await services.sandboxes.persistence.stop(who, id);
    else await services.sandboxes.persistence.pause(who, id);
    return reply.code(204).send();
  });

  /** Resume when paused or stopped (201), else 200; the TTL only ever moves later. */
  const connect = async (request: FastifyRequest, reply: FastifyReply) => {
    const body = parse(E2bConnectSchema, request.body);
    const who = caller(request);
    const id = idOf(request);
    let sandbox = await services.sandboxes.get(who, id);
    let status = 200;
    if (sandbox.state === 'paused') {
      sandbox = await services.sandboxes.persistence.resume(who, id);
      status = 201;
    } else if (sandbox.state === 'stopped') {
      sandbox = await services.sandboxes.persistence.start(who, id);
      status = 201;
    }
    sandbox = await extendTo(who, id, body?.timeout ?? DEFAULT_TIMEOUT_S);
    return reply.code(status).send(view(sandbox));
  };
  app.post('/sandboxes/:id/connect', connect);
  app.post('/v2/sandboxes/:id/connect', connect);
  app.post('/sandboxes/:id/resume', connect);

  /** Move the TTL to at least now + `timeoutS` (never earlier). */
  const extendTo = async (who: Principal, id: string, timeoutS: number): Promise<Sandbox> => {
    const sandbox = await services.sandboxes.get(who, id);
    const wantedAtMs = Date.now() + timeoutS * 1000;
    const currentAtMs = sandbox.timeoutAt === null ? null : Date.parse(sandbox.timeoutAt);
    if (currentAtMs !== null && currentAtMs >= wantedAtMs) return sandbox;
    return services.policies.update(who, id, { timeoutMs: Math.max(1000, timeoutS * 1000) });
  };

  app.post('/sandboxes/:id/fork', async (request, reply) => {
    const body = parse(E2bForkSchema, request.body);
    const who = caller(request);
    const result = await services.sandboxes.persistence.fork(who, idOf(request), { count: body?.count ?? 1 });
    const out = [];
    for (const child of result.items) {
      const sandbox =
        body?.timeout === undefined
          ? child
          : await services.policies.update(who, child.id, { timeoutMs: Math.max(1000, body.timeout * 1000) });
      out.push({ sandbox: view(sandbox) });
    }
    return reply.code(201).send(out);
  });

  app.post('/sandboxes/:id/snapshots', async (request, reply) => {
    const body = parse(E2bSnapshotSchema, request.body);
    const snapshot = await services.sandboxes.persistence.createSnapshot(caller(request), idOf(request), {
      memory: true,
      ...(body?.name === undefined ? {} : { name: body.name }),
    });
    return reply.code(201).send({ snapshotID: snapshot.id, names: snapshot.name === null ? [] : [snapshot.name] });
  });

  app.get('/snapshots', async (request) => {
    const query = parse(E2bSnapshotListQuerySchema, request.query);
    const list = await services.sandboxes.persistence.listSnapshots(caller(request), {
      ...(query.sandboxID === undefined ? {} : { sandboxId: query.sandboxID }),
    });
    return list.items
      .filter((s) => query.name === undefined || s.name === query.name)
      .map((s) => ({ snapshotID: s.id, names: s.name === null ? [] : [s.name] }));
  });

  app.delete('/templates/:id', async (request, reply) => {
    await services.sandboxes.persistence.deleteSnapshot(caller(request), idOf(request));
    return reply.code(204).send();
  });

  app.get('/sandboxes/:id/metrics', async (request) => {
    await services.sandboxes.get(caller(request), idOf(request));
    throw new E2bError(
      501,
      'sandbox metrics are not served by Burrow: use GET /metrics (Prometheus) on the Burrow API',
    );
  });

  /** Replace the sandbox's egress rules (Burrow's network policy); its mode and bandwidth limit stay. */
  app.put('/sandboxes/:id/network', async (request, reply) => {
    const body = parse(E2bNetworkUpdateSchema, request.body ?? {});
    const who = caller(request);
    const id = idOf(request);
    const current = await services.sandboxes.get(who, id);
    const update = networkFromE2bUpdate(body, current.network);
    await services.network.update(who.tenantId, id, update, () => current);
    return reply.code(204).send();
  });

  return app;
}

/** The template an E2B `templateID` names: `base` is `e2b-base` when that template exists. */
async function templateFor(services: Services, who: Principal, templateId: string): Promise<string> {
  if (templateId !== 'base') return templateId;
  const found = await services.templates.get(who, E2B_BASE_TEMPLATE).catch(() => null);
  return found !== null && found.state === 'ready' ? E2B_BASE_TEMPLATE : 'base';
}

/** A 400 for each option Burrow cannot honour; never a silent ignore. */
function refuseUnsupported(body: z.infer<typeof E2bCreateSandboxSchema>): void {
  const refuse = (what: string, why: string) => {
    throw new E2bError(400, `${what} is not supported by Burrow: ${why}`);
  };
  if (body.mcp !== undefined && body.mcp !== null) refuse('mcp', 'there is no MCP gateway');
  if (body.iam !== undefined && body.iam !== null) refuse('iam', 'there is no IAM integration');
  if (body.volumeMounts !== undefined && body.volumeMounts !== null && body.volumeMounts.length > 0) {
    refuse('volumeMounts', 'volumes do not exist in Burrow yet');
  }
}

/** `running` or `paused` as E2B names the state (a stopped sandbox is a filesystem-only pause). */
function e2bState(s: Sandbox): string {
  if (s.state === 'paused' || s.state === 'stopped' || s.state === 'pausing' || s.state === 'stopping') return 'paused';
  return s.state === 'running' || s.state === 'creating' || s.state === 'resuming' ? 'running' : s.state;
}

function toE2bSandbox(s: Sandbox, token: string) {
  return {
    sandboxID: s.id,
    templateID: s.template === E2B_BASE_TEMPLATE ? 'base' : s.template,
    clientID: 'burrow',
    envdVersion: E2B_ENVD_VERSION,
    envdAccessToken: token,
    trafficAccessToken: null,
    domain: null,
  };
}

function listItem(s: Sandbox) {
  return {
    sandboxID: s.id,
    templateID: s.template === E2B_BASE_TEMPLATE ? 'base' : s.template,
    clientID: 'burrow',
    cpuCount: s.resources.cpuCount,
    memoryMB: s.resources.memoryMiB,
    diskSizeMB: s.resources.diskMiB,
    envdVersion: E2B_ENVD_VERSION,
    startedAt: s.createdAt,
    endAt: s.timeoutAt ?? s.expiresAt ?? new Date(Date.parse(s.createdAt) + 30 * 86_400_000).toISOString(),
    state: e2bState(s),
    metadata: s.labels,
  };
}

function lifecycleOf(s: Sandbox) {
  return {
    onTimeout: s.timeoutAction === 'delete' ? 'kill' : 'pause',
    autoResume: s.autoResume,
  };
}

function parse<T extends z.ZodType>(schema: T, value: unknown): z.infer<T> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  throw new E2bError(
    400,
    `invalid request: ${issue === undefined ? 'bad value' : `${issue.path.join('.') || 'body'}: ${issue.message}`}`,
  );
}

/** Status and message of any failure, E2B-shaped. */
function toE2bError(error: unknown): { status: number; message: string } {
  if (error instanceof E2bError) return { status: error.status, message: error.message };
  if (error instanceof ApiError) {
    const status = error.code === ErrorCode.sandboxNotRunning ? 409 : ERROR_HTTP_STATUS[error.code];
    return { status, message: `${error.message}${error.hint === undefined ? '' : ` (${error.hint})`}` };
  }
  const status = (error as { statusCode?: number }).statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) return { status, message: (error as Error).message };
  return { status: 500, message: 'internal error; see the server log' };
}
