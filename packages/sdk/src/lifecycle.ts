import type {
  CreatedWebhookSchema,
  CreateWebhookRequest,
  Event,
  EventType,
  Quota,
  QuotaLimits,
  TenantDefaults,
  TenantPolicyDefaults,
  Webhook,
} from '@burrow/contract';
import type { z } from 'zod';
import {
  CreatedWebhookParser,
  EventListParser,
  EventParser,
  QuotaParser,
  TenantDefaultsParser,
  WebhookListParser,
} from './contract-wire.js';
import { ClientErrorCode, ProtocolError } from './errors.js';
import { type HttpClient, parseStrict } from './http-client.js';
import { SseParser } from './sse-parser.js';

/** Filters of {@link Events.list} and {@link Events.stream}. */
export interface EventFilter {
  /** Only events of this sandbox. */
  sandboxId?: string | undefined;
  /** Only these types. @default every type */
  types?: readonly EventType[] | undefined;
}

/** Options of {@link Events.list}. */
export interface ListEventsOptions extends EventFilter {
  /** Only events after this id (the previous page's `nextCursor`). */
  cursor?: string | undefined;
  /** Page size, 1–500. @default 100 */
  limit?: number | undefined;
}

/** Options of {@link Events.stream}. */
export interface StreamEventsOptions extends EventFilter {
  /** Resume after this event id (sent as `Last-Event-ID`); stored events after it come first. @default '0' (all) */
  after?: string | undefined;
  /** Ends the stream. */
  signal?: AbortSignal | undefined;
}

/** A freshly registered webhook with its signing secret (shown only once). */
export type CreatedWebhook = z.infer<typeof CreatedWebhookSchema>;

/**
 * Lifecycle events of the caller's tenant: every transition with its reason and actor. `client.events`.
 * @example
 * ```ts
 * for await (const event of client.events.stream({ sandboxId: sandbox.id })) console.log(event.type, event.reason);
 * ```
 */
export class Events {
  readonly #http: HttpClient;

  /** @internal Use `client.events`. */
  constructor(http: HttpClient) {
    this.#http = http;
  }

  /**
   * One page of events, oldest first.
   * @returns the events and the cursor to pass next (the last id; null when there were none).
   * @throws `InvalidRequestError` for a bad filter or cursor.
   * @example
   * ```ts
   * const { items } = await client.events.list({ sandboxId: 'sbx_0123456789abcdefghjk', types: ['warning'] });
   * ```
   */
  async list(options: ListEventsOptions = {}): Promise<{ items: Event[]; nextCursor: string | null }> {
    return this.#http.json(EventListParser, 'GET', '/events', {
      query: { sandboxId: options.sandboxId, type: options.types ?? [], cursor: options.cursor, limit: options.limit },
    });
  }

  /**
   * Live events as an async iterable (server-sent events): stored events after `after` first, then new ones as
   * they happen, until `signal` aborts or the iteration stops.
   * @throws `ConnectionError` when the stream breaks (resume with `after` set to the last id seen).
   * @example
   * ```ts
   * const controller = new AbortController();
   * for await (const e of client.events.stream({ signal: controller.signal })) if (e.type === 'deleted') break;
   * ```
   */
  async *stream(options: StreamEventsOptions = {}): AsyncGenerator<Event, void, undefined> {
    const controller = new AbortController();
    const onAbort = () => controller.abort(options.signal?.reason);
    options.signal?.addEventListener('abort', onAbort);
    try {
      const response = await this.#http.send('GET', '/events/stream', {
        query: { sandboxId: options.sandboxId, type: options.types ?? [] },
        headers: { accept: 'text/event-stream', 'last-event-id': options.after ?? '0' },
        signal: controller.signal,
      });
      if (response.body === null)
        throw new ProtocolError('the event stream has no body', { code: ClientErrorCode.protocolError });
      const parser = new SseParser();
      const decoder = new TextDecoder();
      try {
        for await (const chunk of response.body) {
          for (const data of parser.push(decoder.decode(chunk, { stream: true })))
            yield await parseStrict(EventParser, JSON.parse(data));
        }
      } catch (err) {
        if (options.signal?.aborted) return;
        throw this.#http.networkError(err, options.signal);
      }
    } finally {
      options.signal?.removeEventListener('abort', onAbort);
      controller.abort();
    }
  }
}

/**
 * Webhooks of the caller's tenant. Each event is POSTed as JSON with header
 * `burrow-signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>`; verify it with
 * {@link verifyWebhookSignature}. Deliveries are retried with exponential backoff. `client.webhooks`.
 * @example
 * ```ts
 * const { webhook, secret } = await client.webhooks.add({ url: 'https://example.com/burrow', types: ['warning'] });
 * ```
 */
export class Webhooks {
  readonly #http: HttpClient;

  /** @internal Use `client.webhooks`. */
  constructor(http: HttpClient) {
    this.#http = http;
  }

  /**
   * Registers a webhook.
   * @returns it and its secret (generated unless given; shown only now).
   * @throws `InvalidRequestError` for a bad URL or secret.
   * @example
   * ```ts
   * const { secret } = await client.webhooks.add({ url: 'http://127.0.0.1:9000/hook' });
   * ```
   */
  async add(request: CreateWebhookRequest): Promise<CreatedWebhook> {
    return this.#http.json(CreatedWebhookParser, 'POST', '/webhooks', { json: request });
  }

  /**
   * Lists webhooks with their delivery counts.
   * @example
   * ```ts
   * const hooks = await client.webhooks.list();
   * ```
   */
  async list(): Promise<Webhook[]> {
    return (await this.#http.json(WebhookListParser, 'GET', '/webhooks')).items;
  }

  /**
   * Removes a webhook and its pending deliveries.
   * @throws `WebhookNotFoundError`.
   * @example
   * ```ts
   * await client.webhooks.remove('whk_0123456789abcdefghjk');
   * ```
   */
  async remove(id: string): Promise<void> {
    await this.#http.empty('DELETE', `/webhooks/${encodeURIComponent(id)}`);
  }
}

/**
 * Tenant quotas: limits (null: unlimited) and usage. `client.quotas`.
 * @example
 * ```ts
 * const { limits, usage } = await client.quotas.get();
 * ```
 */
export class Quotas {
  readonly #http: HttpClient;

  /** @internal Use `client.quotas`. */
  constructor(http: HttpClient) {
    this.#http = http;
  }

  /**
   * The caller's tenant's quota, or another tenant's (admin keys).
   * @throws `PermissionDeniedError` for another tenant without an admin key.
   * @example
   * ```ts
   * const quota = await client.quotas.get();
   * ```
   */
  async get(tenantId?: string): Promise<Quota> {
    if (tenantId === undefined) return this.#http.json(QuotaParser, 'GET', '/quota');
    return this.#http.json(QuotaParser, 'GET', `/tenants/${encodeURIComponent(tenantId)}/quota`);
  }

  /**
   * Replaces a tenant's limits (admin keys only); a limit left out is unlimited.
   * @throws `PermissionDeniedError` without an admin key.
   * @example
   * ```ts
   * await client.quotas.set('acme', { maxRunning: 10, maxSandboxes: 50 });
   * ```
   */
  async set(tenantId: string, limits: Partial<QuotaLimits>): Promise<Quota> {
    return this.#http.json(QuotaParser, 'PUT', `/tenants/${encodeURIComponent(tenantId)}/quota`, { json: limits });
  }

  /**
   * A tenant's lifecycle policy defaults: what an admin set, what a create naming no policy gets, and the source of
   * each (`tenant-default` or `server-default`).
   * @throws `PermissionDeniedError` for another tenant without an admin key.
   * @example
   * ```ts
   * const { effective } = await client.quotas.defaults('acme');
   * ```
   */
  async defaults(tenantId: string): Promise<TenantDefaults> {
    return this.#http.json(TenantDefaultsParser, 'GET', `/tenants/${encodeURIComponent(tenantId)}/defaults`);
  }

  /**
   * Replaces a tenant's lifecycle policy defaults (admin keys only); a field left out inherits the server default,
   * null turns the policy off. Only sandboxes created afterwards get them.
   * @throws `PermissionDeniedError` without an admin key; `InvalidRequestError` for values out of range.
   * @example
   * ```ts
   * await client.quotas.setDefaults('acme', { idleTimeoutMs: 300_000, pausedRetentionMs: 604_800_000 });
   * ```
   */
  async setDefaults(tenantId: string, defaults: TenantPolicyDefaults): Promise<TenantDefaults> {
    return this.#http.json(TenantDefaultsParser, 'PUT', `/tenants/${encodeURIComponent(tenantId)}/defaults`, {
      json: defaults,
    });
  }
}

/**
 * Checks a webhook delivery: recomputes HMAC-SHA256 over `"<t>.<rawBody>"` with `secret`, compares in constant
 * time, and refuses timestamps further than `toleranceMs` from now (replays).
 * @returns whether the signature is valid
 * @example
 * ```ts
 * const ok = await verifyWebhookSignature(secret, rawBody, req.headers['burrow-signature']);
 * ```
 */
export async function verifyWebhookSignature(
  secret: string,
  rawBody: string,
  header: string | undefined,
  options: { toleranceMs?: number; nowMs?: number } = {},
): Promise<boolean> {
  const match = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(header ?? '');
  if (match === null) return false;
  const [, t, v1] = match;
  const nowMs = options.nowMs ?? Date.now();
  if (Math.abs(nowMs - Number(t) * 1000) > (options.toleranceMs ?? 300_000)) return false;
  const { createHmac, timingSafeEqual } = await import('node:crypto');
  const expected = createHmac('sha256', secret).update(`${t}.${rawBody}`).digest();
  return timingSafeEqual(expected, Buffer.from(v1 ?? '', 'hex'));
}
