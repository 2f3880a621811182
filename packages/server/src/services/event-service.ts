import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Event, EventList, EventType, Webhook } from '@burrow/contract';
import { ErrorCode } from '@burrow/contract';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { ActorContext } from '../lifecycle/actor-context.js';
import type { DB } from '../store/database.js';
import { type EventRecord, EventStore, type NewEvent } from '../store/event-store.js';
import type { InTransaction } from '../store/in-transaction.js';
import type { QuotaDenial } from '../store/quota-store.js';
import type { SandboxRecord, TransitionHook } from '../store/sandbox-store.js';
import { ApiError } from '../util/api-error.js';
import { type Clock, isoNow } from '../util/clock.js';
import { newId } from '../util/ids.js';
import type { Principal } from './key-service.js';
import { checkWebhookUrl } from './webhook-address-policy.js';

/** The API view of an event row. */
export function toEvent(r: EventRecord): Event {
  return {
    id: String(r.seq),
    type: r.type,
    sandboxId: r.sandboxId,
    snapshotId: r.snapshotId,
    reason: r.reason,
    actor: r.actor,
    message: r.message,
    data: r.data,
    at: r.at,
  };
}

/** What a new event says; tenant, actor, reason default from the context. */
export interface EventInput {
  tenantId: string;
  type: EventType;
  sandboxId?: string | null;
  snapshotId?: string | null;
  /** @default the actor scope's reason, else `UserRequest` (API) or `Reconcile` (system) */
  reason?: string;
  message: string;
  data?: Record<string, unknown>;
}

/**
 * The event type a sandbox state change is, as a pure function of the row before and after.
 * @returns the type and data, or null when the change is not an event (an intermediate step or a rollback)
 */
export function transitionEvent(
  before: SandboxRecord,
  after: SandboxRecord | null,
): { type: EventType; data: Record<string, unknown> } | null {
  if (after === null) return before.state === 'creating' ? null : { type: 'deleted', data: {} };
  if (after.state === 'error') return { type: 'error', data: { from: before.state } };
  if (before.state === 'creating' && after.state === 'running') {
    return after.parentId !== null
      ? { type: 'forked', data: { parentId: after.parentId } }
      : { type: 'created', data: { template: after.template, snapshotId: after.snapshotId } };
  }
  if (before.state === 'pausing' && after.state === 'paused') return { type: 'paused', data: {} };
  if (before.state === 'resuming' && after.state === 'running') {
    return (before.lifecycle?.pausedAt ?? null) !== null
      ? { type: 'resumed', data: {} }
      : { type: 'started', data: {} };
  }
  if (before.state === 'stopping' && after.state === 'stopped') return { type: 'stopped', data: {} };
  return null;
}

/**
 * The facts usage metering reads from a transition event (`services/usage-meter.ts`): the sandbox's resources and
 * labels as they are from this event on, so usage needs no row that a deletion removes.
 */
function meteredFacts(r: SandboxRecord): {
  resources: { cpuCount: number; memoryMiB: number; diskMiB: number };
  labels: Record<string, string>;
} {
  return { resources: { cpuCount: r.cpuCount, memoryMiB: r.memoryMiB, diskMiB: r.diskMiB }, labels: r.labels };
}

const DEFAULT_REASONS: Partial<Record<EventType, string>> = {
  error: 'RuntimeError',
  quota_denied: 'QuotaExceeded',
};

/**
 * Records lifecycle events (the store's state changes, quota refusals, policy warnings and expiries), lists
 * them, streams them live to subscribers, and manages the tenant's webhooks. Appending an event queues its
 * webhook deliveries in the same transaction; {@link onAppended} wakes the dispatcher.
 */
export class EventService {
  private readonly bus = new EventEmitter();
  /** Recordings in flight, so that tests and shutdown can wait for them. */
  private pending = new Set<Promise<unknown>>();
  /** Called after each append (main.ts points it at the webhook dispatcher). */
  onAppended: (() => void) | null = null;

  /**
   * @param deps.allowInternalWebhooks accept webhook URLs on loopback, private, link-local and reserved addresses
   *   (BURROW_WEBHOOK_ALLOW_PRIVATE). @default false
   */
  constructor(
    private readonly deps: {
      events: EventStore;
      actors: ActorContext;
      clock: Clock;
      logger: Logger;
      allowInternalWebhooks?: boolean | undefined;
    },
  ) {
    this.bus.setMaxListeners(0);
  }

  /**
   * Append one event; the actor and reason come from the current {@link ActorContext} unless given.
   * @returns the stored event
   */
  async record(input: EventInput): Promise<Event> {
    const stored = await this.deps.events.append(this.toNewEvent(input), { deliveryId: () => newId('dlv') });
    this.published(stored);
    return toEvent(stored);
  }

  /** Tell live streams and the webhook dispatcher about a stored event. */
  private published(stored: EventRecord): void {
    this.bus.emit('event', stored);
    this.onAppended?.();
  }

  /** The row to store for `input`, with the current actor and reason. */
  private toNewEvent(input: EventInput): NewEvent {
    const scope = this.deps.actors.current();
    const actor = scope?.actor ?? 'system';
    const event: NewEvent = {
      tenantId: input.tenantId,
      type: input.type,
      sandboxId: input.sandboxId ?? null,
      snapshotId: input.snapshotId ?? null,
      reason:
        input.reason ??
        scope?.reason ??
        DEFAULT_REASONS[input.type] ??
        (actor.startsWith('system:') ? 'Reconcile' : 'UserRequest'),
      actor,
      message: input.message,
      data: input.data ?? {},
      at: isoNow(this.deps.clock),
    };
    return event;
  }

  /**
   * The events `inputs` as work for a store write's transaction ({@link InTransaction}): they are appended in the
   * same transaction as the change they report (a crash keeps both or neither) and published after its commit.
   * The actor and reason are taken now, in the caller's scope.
   * @example await snapshots.remove(id, { also: events.inTransaction({ tenantId, type: 'snapshot_deleted', … }) })
   */
  inTransaction(...inputs: EventInput[]): InTransaction {
    const rows = inputs.map((input) => this.toNewEvent(input));
    return async (trx) => {
      const stored: EventRecord[] = [];
      for (const row of rows) stored.push(await EventStore.appendIn(trx, row, { deliveryId: () => newId('dlv') }));
      return () => {
        for (const e of stored) this.published(e);
      };
    };
  }

  /** Record without waiting (store observers are synchronous); failures are logged, never thrown. */
  recordLater(input: EventInput): void {
    const p = this.record(input)
      .catch((error: unknown) =>
        this.deps.logger.error(
          { err: error, type: input.type, sandboxId: input.sandboxId },
          'recording an event failed',
        ),
      )
      .finally(() => this.pending.delete(p));
    this.pending.add(p);
  }

  /** Wait until every {@link recordLater} so far is stored. */
  async flush(): Promise<void> {
    while (this.pending.size > 0) await Promise.all([...this.pending]);
  }

  /**
   * Store observer ({@link TransitionHook}): turn a sandbox state change into an event, appended in the same
   * transaction `trx` as the change (a crash keeps both or neither).
   * @returns the after-commit callback that publishes the event to live streams and webhooks, or null
   */
  async onSandboxTransition(
    trx: Kysely<DB>,
    before: SandboxRecord,
    after: SandboxRecord | null,
  ): Promise<(() => void) | null> {
    const input = this.transitionInput(before, after);
    if (input === null) return null;
    const stored = await EventStore.appendIn(trx, this.toNewEvent(input), { deliveryId: () => newId('dlv') });
    return () => this.published(stored);
  }

  /** The event a sandbox state change is, or null. */
  private transitionInput(before: SandboxRecord, after: SandboxRecord | null): EventInput | null {
    const mapped = transitionEvent(before, after);
    if (mapped === null) return null;
    const condition = after?.conditions.at(-1);
    const fresh =
      condition !== undefined && !before.conditions.some((c) => c.at === condition.at && c.type === condition.type);
    return {
      tenantId: before.tenantId,
      type: mapped.type,
      sandboxId: before.id,
      message: fresh ? condition.message : `sandbox ${before.id} ${mapped.type}`,
      data: { ...mapped.data, state: after?.state ?? 'deleted', ...meteredFacts(after ?? before) },
      ...(fresh && mapped.type === 'error' ? { reason: condition.reason } : {}),
    };
  }

  /** Quota observer: record a `quota_denied` event. */
  onQuotaDenied(denial: QuotaDenial): void {
    this.recordLater({
      tenantId: denial.tenantId,
      type: 'quota_denied',
      reason: 'QuotaExceeded',
      message: `refused: the ${denial.limit} quota is ${denial.max} and ${denial.used} is used`,
      data: { limit: denial.limit, max: denial.max, used: denial.used, requested: denial.requested },
    });
  }

  /**
   * A page of the caller's events after `cursor`, oldest first.
   * @throws never for a well-formed query (the contract validates the cursor)
   */
  async list(
    caller: Principal,
    query: { sandboxId?: string | undefined; type: EventType[]; limit: number; cursor?: string | undefined },
  ): Promise<EventList> {
    const rows = await this.deps.events.list(caller.tenantId, {
      afterSeq: query.cursor === undefined ? 0 : Number(query.cursor),
      limit: query.limit,
      sandboxId: query.sandboxId,
      types: query.type,
    });
    const last = rows.at(-1);
    return { items: rows.map(toEvent), nextCursor: last === undefined ? (query.cursor ?? null) : String(last.seq) };
  }

  /**
   * Stream the caller's events after `afterSeq` (stored ones first, then live ones), in order, without gaps or
   * repeats, until `signal` aborts.
   */
  async *stream(
    caller: Principal,
    query: { sandboxId?: string | undefined; type: EventType[] },
    afterSeq: number,
    signal: AbortSignal,
  ): AsyncGenerator<Event> {
    const queue: EventRecord[] = [];
    let wake: (() => void) | null = null;
    const listener = (e: EventRecord) => {
      if (e.tenantId !== caller.tenantId) return;
      queue.push(e);
      wake?.();
    };
    const onAbort = () => wake?.();
    this.bus.on('event', listener);
    signal.addEventListener('abort', onAbort);
    const matches = (e: EventRecord) =>
      (query.sandboxId === undefined || e.sandboxId === query.sandboxId) &&
      (query.type.length === 0 || query.type.includes(e.type));
    try {
      let last = afterSeq;
      for (;;) {
        const page = await this.deps.events.list(caller.tenantId, {
          afterSeq: last,
          limit: 500,
          types: query.type,
          sandboxId: query.sandboxId,
        });
        for (const e of page) {
          last = e.seq;
          yield toEvent(e);
        }
        if (page.length < 500) break;
      }
      while (!signal.aborted) {
        const next = queue.shift();
        if (next === undefined) {
          await new Promise<void>((resolve) => {
            wake = resolve;
          });
          wake = null;
          continue;
        }
        if (next.seq <= last || !matches(next)) continue;
        last = next.seq;
        yield toEvent(next);
      }
    } finally {
      this.bus.off('event', listener);
      signal.removeEventListener('abort', onAbort);
    }
  }

  /**
   * Register a webhook for the caller's tenant. Unless internal targets are allowed, a URL whose host is or
   * resolves to a loopback, private, link-local or reserved address is refused (each delivery checks again).
   * @returns it and its secret (shown once)
   * @throws ApiError `webhook_url_forbidden`
   */
  async addWebhook(
    caller: Principal,
    input: { url: string; secret?: string | undefined; types?: EventType[] | undefined },
  ): Promise<{ webhook: Webhook; secret: string }> {
    if (this.deps.allowInternalWebhooks !== true) await checkWebhookUrl(input.url);
    const secret = input.secret ?? `whsec_${randomBytes(24).toString('base64url')}`;
    const record = {
      id: newId('whk'),
      tenantId: caller.tenantId,
      url: input.url,
      secret,
      types: input.types ?? null,
      createdAt: isoNow(this.deps.clock),
    };
    await this.deps.events.insertWebhook(record);
    return {
      webhook: {
        id: record.id,
        url: record.url,
        types: record.types,
        createdAt: record.createdAt,
        deliveries: { pending: 0, delivered: 0, failed: 0 },
      },
      secret,
    };
  }

  async listWebhooks(caller: Principal): Promise<Webhook[]> {
    const hooks = await this.deps.events.listWebhooks(caller.tenantId);
    const counts = await this.deps.events.deliveryCounts(hooks.map((h) => h.id));
    return hooks.map((h) => {
      const c = counts.get(h.id) ?? {};
      return {
        id: h.id,
        url: h.url,
        types: h.types,
        createdAt: h.createdAt,
        deliveries: { pending: c.pending ?? 0, delivered: c.delivered ?? 0, failed: c.failed ?? 0 },
      };
    });
  }

  /** @throws ApiError `webhook_not_found` */
  async removeWebhook(caller: Principal, id: string): Promise<void> {
    if (!(await this.deps.events.removeWebhook(caller.tenantId, id))) {
      throw new ApiError(ErrorCode.webhookNotFound, `no webhook ${id}`, {
        hint: 'list webhooks with `burrow webhooks ls` (GET /v1/webhooks)',
      });
    }
  }
}
