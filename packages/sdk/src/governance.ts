import type { AuditList, AuditRecord, AuditResult, AuditVerify, UsageReport } from '@burrow/contract';
import { AuditListParser, AuditVerifyParser, UsageReportParser } from './contract-wire.js';
import type { HttpClient } from './http-client.js';

/** Filters of {@link Audit.list}. */
export interface ListAuditOptions {
  /** Records at or after this instant (ISO-8601). */
  from?: string | undefined;
  /** Records before this instant (ISO-8601). */
  to?: string | undefined;
  /** Another tenant's records (admin keys). @default the caller's tenant (every tenant for an admin key) */
  tenant?: string | undefined;
  keyId?: string | undefined;
  /** A sandbox, key, snapshot, template, webhook or tenant id. */
  target?: string | undefined;
  result?: AuditResult | undefined;
  /** Action prefix: `DELETE`, `POST /v1/sandboxes`. */
  action?: string | undefined;
  /** Only records after this id (the previous page's `nextCursor`). */
  cursor?: string | undefined;
  /** Page size, 1–1000. @default 100 */
  limit?: number | undefined;
}

/** Options of {@link Audit.follow}. */
export interface FollowAuditOptions extends Omit<ListAuditOptions, 'limit'> {
  /** Time between polls once the log is read to its end, ms. @default 1000 */
  pollMs?: number | undefined;
  /** Ends the iteration. */
  signal?: AbortSignal | undefined;
}

/**
 * The audit log: every request that changed something or was refused, hash-chained. `client.audit`.
 * @example
 * ```ts
 * const { items } = await client.audit.list({ result: 'refused' });
 * ```
 */
export class Audit {
  readonly #http: HttpClient;

  /** @internal Use `client.audit`. */
  constructor(http: HttpClient) {
    this.#http = http;
  }

  /**
   * One page of records, oldest first.
   * @returns the records and the cursor to pass next (null when the page is empty).
   * @throws `InvalidRequestError` for a bad filter (`from` after `to`), `PermissionDeniedError` for another tenant.
   * @example
   * ```ts
   * const page = await client.audit.list({ target: 'sbx_0123456789abcdefghjk' });
   * ```
   */
  async list(options: ListAuditOptions = {}): Promise<AuditList> {
    const { from, to, tenant, keyId, target, result, action, cursor, limit } = options;
    return this.#http.json(AuditListParser, 'GET', '/audit', {
      query: { from, to, tenant, keyId, target, result, action, cursor, limit },
    });
  }

  /**
   * Every record from `cursor` on, then new ones as they are written (polled), until `signal` aborts.
   * @example
   * ```ts
   * for await (const record of client.audit.follow({ result: 'refused' })) console.log(record.action);
   * ```
   */
  async *follow(options: FollowAuditOptions = {}): AsyncGenerator<AuditRecord, void, undefined> {
    let cursor = options.cursor;
    const pollMs = options.pollMs ?? 1000;
    while (options.signal?.aborted !== true) {
      const page = await this.list({ ...options, cursor, limit: 1000 });
      for (const record of page.items) yield record;
      cursor = page.nextCursor ?? cursor;
      if (page.items.length < 1000) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, pollMs);
          options.signal?.addEventListener('abort', () => {
            clearTimeout(timer);
            resolve();
          });
        });
      }
    }
  }

  /**
   * Checks the hash chain from its retention anchor to its head (admin keys).
   * @returns `ok`, and each removed or edited record by id.
   * @example
   * ```ts
   * const { ok, problems } = await client.audit.verify();
   * ```
   */
  async verify(): Promise<AuditVerify> {
    return this.#http.json(AuditVerifyParser, 'GET', '/audit/verify');
  }
}

/** Options of {@link Usage.get}. */
export interface UsageOptions {
  /** Window start (ISO-8601, inclusive). @default 24 hours before `to` */
  from?: string | undefined;
  /** Window end (ISO-8601, exclusive); time after now is not charged. @default now */
  to?: string | undefined;
  /** `sandbox`, `day` (UTC) or `label:KEY`. @default 'sandbox' */
  groupBy?: 'sandbox' | 'day' | `label:${string}` | undefined;
  /** Another tenant's usage (admin keys). @default the caller's tenant */
  tenant?: string | undefined;
}

/**
 * Usage metering from the event log: running seconds × vCPU and × GiB memory, paused and stopped seconds × GiB disk,
 * snapshot GiB-seconds. `client.usage`.
 * @example
 * ```ts
 * const { total } = await client.usage.get({ from: '2026-12-01T00:00:00Z', groupBy: 'day' });
 * ```
 */
export class Usage {
  readonly #http: HttpClient;

  /** @internal Use `client.usage`. */
  constructor(http: HttpClient) {
    this.#http = http;
  }

  /**
   * Usage over a window, grouped.
   * @throws `InvalidRequestError` for `from` after `to` or an unknown `groupBy`; `PermissionDeniedError` for another
   *   tenant without an admin key.
   * @example
   * ```ts
   * const report = await client.usage.get({ groupBy: 'label:team' });
   * ```
   */
  async get(options: UsageOptions = {}): Promise<UsageReport> {
    const { from, to, groupBy, tenant } = options;
    return this.#http.json(UsageReportParser, 'GET', '/usage', { query: { from, to, groupBy, tenant } });
  }
}
