import type {
  ApiKey,
  BuildTemplateRequest,
  CreateApiKeyRequest,
  CreatedApiKeySchema,
  HealthSchema,
  Template,
} from '@burrow/contract';
import type { z } from 'zod';
import { Buckets } from './buckets.js';
import type { ConnectionOptions } from './connection-config.js';
import {
  ApiKeyListParser,
  ConsoleLoginLinkParser,
  CreatedApiKeyParser,
  HealthParser,
  INVALID,
  TemplateBuildEventParser,
  TemplateListParser,
  TemplateParser,
} from './contract-wire.js';
import { ClientErrorCode, errorFromWire, ProtocolError, TemplateBuildError } from './errors.js';
import { Audit, Usage } from './governance.js';
import { HttpClient, parseBody } from './http-client.js';
import { Events, Quotas, Webhooks } from './lifecycle.js';
import { Secrets } from './secrets.js';
import { SseParser } from './sse-parser.js';

/** Server health as returned by `GET /v1/health`. */
export type Health = z.infer<typeof HealthSchema>;
/** A freshly created API key with its secret (shown only once). */
export type CreatedApiKey = z.infer<typeof CreatedApiKeySchema>;

/** Options of {@link Templates.build}. */
export interface BuildTemplateOptions {
  /** Called with each line of the build log as it arrives. */
  onLog?: ((line: string) => void) | undefined;
  /** Stops following the build (the server may finish it anyway). */
  signal?: AbortSignal | undefined;
}

/**
 * Templates: read-only root filesystems sandboxes start from. `client.templates`.
 *
 * @example
 * ```ts
 * const client = new BurrowClient();
 * const template = await client.templates.build({ name: 'py-data', apt: ['python3-numpy'] }, { onLog: console.error });
 * ```
 */
export class Templates {
  readonly #http: HttpClient;

  /** @internal Use `client.templates`. */
  constructor(http: HttpClient) {
    this.#http = http;
  }

  /**
   * Lists every template.
   * @example
   * ```ts
   * const names = (await client.templates.list()).map((t) => t.name);
   * ```
   */
  async list(): Promise<Template[]> {
    return (await this.#http.json(TemplateListParser, 'GET', '/templates')).items;
  }

  /**
   * Gets one template.
   * @throws `TemplateNotFoundError` when no template has this name.
   * @example
   * ```ts
   * const { state, sizeBytes } = await client.templates.get('base');
   * ```
   */
  async get(name: string): Promise<Template> {
    return this.#http.json(TemplateParser, 'GET', `/templates/${encodeURIComponent(name)}`);
  }

  /**
   * Builds a template from a parent (`from`, default `'base'`) plus apt packages and shell commands, following the
   * build log over server-sent events.
   * @returns the ready template.
   * @throws `TemplateBuildError` when the build fails; `ConflictError` when the name is taken;
   * `TemplateNotFoundError` for an unknown parent; `PermissionDeniedError` for a non-admin key.
   * @example
   * ```ts
   * await client.templates.build({ name: 'node', apt: ['nodejs'] }, { onLog: (line) => console.error(line) });
   * ```
   */
  async build(request: BuildTemplateRequest, options: BuildTemplateOptions = {}): Promise<Template> {
    const response = await this.#http.send('POST', '/templates', {
      json: request,
      headers: { accept: 'text/event-stream' },
      signal: options.signal,
    });
    const contentType = response.headers.get('content-type') ?? '';
    if (!contentType.includes('text/event-stream')) {
      return await parseBody(TemplateParser, await response.json(), response);
    }
    if (response.body === null) throw protocolError('the build stream has no body');
    const parser = new SseParser();
    const decoder = new TextDecoder();
    try {
      for await (const chunk of response.body) {
        for (const data of parser.push(decoder.decode(chunk, { stream: true }))) {
          const template = handleBuildEvent(data, options);
          if (template !== undefined) return template;
        }
      }
    } catch (err) {
      throw this.#http.networkError(err, options.signal);
    }
    for (const data of parser.push(decoder.decode()).concat(parser.end())) {
      const template = handleBuildEvent(data, options);
      if (template !== undefined) return template;
    }
    throw protocolError('the build stream ended without a done or error event');
  }

  /**
   * Deletes a template.
   * @throws `TemplateNotFoundError` when no template has this name; `ConflictError` when sandboxes still use it.
   * @example
   * ```ts
   * await client.templates.delete('py-data');
   * ```
   */
  async delete(name: string): Promise<void> {
    await this.#http.empty('DELETE', `/templates/${encodeURIComponent(name)}`);
  }
}

function handleBuildEvent(data: string, options: BuildTemplateOptions): Template | undefined {
  let json: unknown;
  try {
    json = JSON.parse(data);
  } catch (err) {
    throw protocolError(`unparseable build event: ${data.slice(0, 200)}`, err);
  }
  const event = TemplateBuildEventParser.parse(json);
  if (event === INVALID) throw protocolError(`unexpected build event: ${data.slice(0, 200)}`);
  switch (event.type) {
    case 'log':
      options.onLog?.(event.line);
      return undefined;
    case 'done':
      return event.template;
    case 'error': {
      const error = errorFromWire({ code: event.code, message: event.message }, 0);
      if (error instanceof TemplateBuildError || event.code !== 'internal_error') throw error;
      throw new TemplateBuildError(event.message, { code: 'template_build_failed', cause: error });
    }
  }
}

function protocolError(message: string, cause?: unknown): ProtocolError {
  return new ProtocolError(message, { code: ClientErrorCode.protocolError, cause });
}

/**
 * API keys of the caller's tenant (all tenants for admin keys). `client.keys`.
 *
 * @example
 * ```ts
 * const { key, secret } = await client.keys.create({ name: 'ci', role: 'member' });
 * ```
 */
export class Keys {
  readonly #http: HttpClient;

  /** @internal Use `client.keys`. */
  constructor(http: HttpClient) {
    this.#http = http;
  }

  /**
   * Creates a key. The secret is in the result and is never shown again.
   * @throws `PermissionDeniedError` when a member key names another tenant or the admin role.
   * @example
   * ```ts
   * const { secret } = await client.keys.create({ name: 'agent-1', tenantId: 'team-a' });
   * ```
   */
  async create(request: CreateApiKeyRequest): Promise<CreatedApiKey> {
    return this.#http.json(CreatedApiKeyParser, 'POST', '/keys', { json: request });
  }

  /**
   * Lists keys (without secrets), revoked ones included.
   * @example
   * ```ts
   * const active = (await client.keys.list()).filter((k) => k.revokedAt === null);
   * ```
   */
  async list(): Promise<ApiKey[]> {
    return (await this.#http.json(ApiKeyListParser, 'GET', '/keys')).items;
  }

  /**
   * Revokes a key; requests with it fail with `AuthenticationError` from then on.
   * @throws `KeyNotFoundError` when no key has this id.
   * @example
   * ```ts
   * await client.keys.revoke('key_0123456789abcdefghjk');
   * ```
   */
  async revoke(id: string): Promise<void> {
    await this.#http.empty('DELETE', `/keys/${encodeURIComponent(id)}`);
  }

  /**
   * A one-time link (valid 5 minutes) that signs a browser in to the web console as the calling key; `burrow ui`.
   * @returns the absolute URL on this client's server and when it stops working (ISO-8601)
   * @example
   * ```ts
   * const { url } = await client.keys.consoleLoginLink();
   * ```
   */
  async consoleLoginLink(): Promise<{ url: string; expiresAt: string }> {
    const link = await this.#http.json(ConsoleLoginLinkParser, 'POST', '/console/login-links');
    return { url: new URL(link.path, this.#http.connection.apiUrl).toString(), expiresAt: link.expiresAt };
  }
}

/**
 * Client for the server-wide parts of the API: health, templates and keys. Sandboxes have their own handle,
 * {@link Sandbox}.
 *
 * Connection: `apiUrl` defaults to `BURROW_URL` (else `http://127.0.0.1:7420`), `apiKey` to `BURROW_API_KEY`.
 *
 * @example
 * ```ts
 * const client = new BurrowClient({ apiUrl: 'http://127.0.0.1:7420' });
 * console.log((await client.health()).version);
 * for (const template of await client.templates.list()) console.log(template.name, template.state);
 * ```
 */
export class BurrowClient {
  /** Templates: list, get, build, delete. */
  readonly templates: Templates;
  /** API keys: create, list, revoke. */
  readonly keys: Keys;
  /** Lifecycle events: list and live stream. */
  readonly events: Events;
  /** Webhooks: add, list, remove. */
  readonly webhooks: Webhooks;
  /** Tenant quotas: get, set (admin). */
  readonly quotas: Quotas;
  /** The audit log: list, follow, verify. */
  readonly audit: Audit;
  /** Usage metering. */
  readonly usage: Usage;
  /** Secrets substituted at egress: set, rotate, list, delete. */
  readonly secrets: Secrets;
  /** Named S3 bucket credentials: add, list, remove. */
  readonly buckets: Buckets;
  readonly #http: HttpClient;

  constructor(options: ConnectionOptions = {}) {
    this.#http = new HttpClient(options);
    this.templates = new Templates(this.#http);
    this.keys = new Keys(this.#http);
    this.events = new Events(this.#http);
    this.webhooks = new Webhooks(this.#http);
    this.quotas = new Quotas(this.#http);
    this.audit = new Audit(this.#http);
    this.usage = new Usage(this.#http);
    this.secrets = new Secrets(this.#http);
    this.buckets = new Buckets(this.#http);
  }

  /** Base URL the client talks to (defaults applied). */
  get apiUrl(): string {
    return this.#http.connection.apiUrl;
  }

  /**
   * Checks that the server is up (needs no key).
   * @returns its status, version and runtime.
   * @throws `ConnectionError` when the server cannot be reached.
   * @example
   * ```ts
   * const { version, runtime } = await new BurrowClient().health();
   * ```
   */
  async health(): Promise<Health> {
    return this.#http.json(HealthParser, 'GET', '/health');
  }
}
