import type { EventType } from '@burrow/contract';
import type { Kysely, Selectable } from 'kysely';
import type { DB, EventsTable, WebhooksTable } from './database.js';

/** A recorded event as the services use it. */
export interface EventRecord {
  seq: number;
  tenantId: string;
  type: EventType;
  sandboxId: string | null;
  snapshotId: string | null;
  reason: string;
  actor: string;
  message: string;
  data: Record<string, unknown>;
  at: string;
}

/** A new event, before the store numbers it. */
export type NewEvent = Omit<EventRecord, 'seq'>;

/** A webhook row. */
export interface WebhookRecord {
  id: string;
  tenantId: string;
  url: string;
  secret: string;
  /** Event types it wants, or null for every type. */
  types: EventType[] | null;
  createdAt: string;
}

/** A delivery due for an attempt, with what it needs to send. */
export interface DueDelivery {
  id: string;
  attempts: number;
  webhook: WebhookRecord;
  event: EventRecord;
}

function toEvent(row: Selectable<EventsTable>): EventRecord {
  return {
    seq: Number(row.seq),
    tenantId: row.tenant_id,
    type: row.type as EventType,
    sandboxId: row.sandbox_id,
    snapshotId: row.snapshot_id,
    reason: row.reason,
    actor: row.actor,
    message: row.message,
    data: JSON.parse(row.data) as Record<string, unknown>,
    at: row.at,
  };
}

function toWebhook(row: Selectable<WebhooksTable>): WebhookRecord {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    url: row.url,
    secret: row.secret,
    types: row.types === null ? null : (JSON.parse(row.types) as EventType[]),
    createdAt: row.created_at,
  };
}

/** Events, webhooks and webhook deliveries. Tenant-facing queries filter by tenant. */
export class EventStore {
  constructor(private readonly db: Kysely<DB>) {}

  /**
   * Append an event and queue one delivery per matching webhook of its tenant, in one transaction.
   * @returns the stored event with its sequence number
   */
  async append(event: NewEvent, options: { deliveryId: () => string }): Promise<EventRecord> {
    return this.db.transaction().execute((trx) => EventStore.appendIn(trx, event, options));
  }

  /**
   * {@link append} inside the caller's transaction `trx` (the event commits or rolls back with the caller's write).
   * @returns the stored event with its sequence number
   */
  static async appendIn(trx: Kysely<DB>, event: NewEvent, options: { deliveryId: () => string }): Promise<EventRecord> {
    const row = await trx
      .insertInto('events')
      .values({
        tenant_id: event.tenantId,
        type: event.type,
        sandbox_id: event.sandboxId,
        snapshot_id: event.snapshotId,
        reason: event.reason,
        actor: event.actor,
        message: event.message,
        data: JSON.stringify(event.data),
        at: event.at,
      })
      .returning('seq')
      .executeTakeFirstOrThrow();
    const seq = Number(row.seq);
    const hooks = await trx.selectFrom('webhooks').selectAll().where('tenant_id', '=', event.tenantId).execute();
    const wanted = hooks.map(toWebhook).filter((h) => h.types === null || h.types.includes(event.type));
    if (wanted.length > 0) {
      await trx
        .insertInto('webhook_deliveries')
        .values(
          wanted.map((h) => ({
            id: options.deliveryId(),
            webhook_id: h.id,
            event_seq: seq,
            state: 'pending',
            attempts: 0,
            next_attempt_at: event.at,
            last_status: null,
            last_error: null,
            updated_at: event.at,
          })),
        )
        .execute();
    }
    return { ...event, seq };
  }

  /** Events of `tenantId` after `afterSeq`, oldest first, filtered by sandbox and types. */
  async list(
    tenantId: string,
    options: { afterSeq: number; limit: number; sandboxId?: string | undefined; types: readonly EventType[] },
  ): Promise<EventRecord[]> {
    let q = this.db
      .selectFrom('events')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('seq', '>', options.afterSeq);
    if (options.sandboxId !== undefined) q = q.where('sandbox_id', '=', options.sandboxId);
    if (options.types.length > 0) q = q.where('type', 'in', [...options.types]);
    const rows = await q.orderBy('seq').limit(options.limit).execute();
    return rows.map(toEvent);
  }

  /** Events of every tenant (or `tenantId`'s) of `types` after `afterSeq`, oldest first (usage metering's read). */
  async listOfTypes(
    tenantId: string | null,
    options: { afterSeq: number; limit: number; types: readonly EventType[] },
  ): Promise<EventRecord[]> {
    let q = this.db
      .selectFrom('events')
      .selectAll()
      .where('seq', '>', options.afterSeq)
      .where('type', 'in', [...options.types]);
    if (tenantId !== null) q = q.where('tenant_id', '=', tenantId);
    const rows = await q.orderBy('seq').limit(options.limit).execute();
    return rows.map(toEvent);
  }

  /** Events of one sandbox of any tenant, oldest first (the reconciler's and tests' view). */
  async listForSandbox(sandboxId: string): Promise<EventRecord[]> {
    const rows = await this.db
      .selectFrom('events')
      .selectAll()
      .where('sandbox_id', '=', sandboxId)
      .orderBy('seq')
      .execute();
    return rows.map(toEvent);
  }

  async insertWebhook(record: WebhookRecord): Promise<void> {
    await this.db
      .insertInto('webhooks')
      .values({
        id: record.id,
        tenant_id: record.tenantId,
        url: record.url,
        secret: record.secret,
        types: record.types === null ? null : JSON.stringify(record.types),
        created_at: record.createdAt,
      })
      .execute();
  }

  async listWebhooks(tenantId: string): Promise<WebhookRecord[]> {
    const rows = await this.db
      .selectFrom('webhooks')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .orderBy('created_at')
      .orderBy('id')
      .execute();
    return rows.map(toWebhook);
  }

  /** Delivery counts by state for each webhook id. */
  async deliveryCounts(webhookIds: readonly string[]): Promise<Map<string, Record<string, number>>> {
    const out = new Map<string, Record<string, number>>();
    if (webhookIds.length === 0) return out;
    const rows = await this.db
      .selectFrom('webhook_deliveries')
      .select(['webhook_id', 'state', (eb) => eb.fn.countAll<number>().as('n')])
      .where('webhook_id', 'in', [...webhookIds])
      .groupBy(['webhook_id', 'state'])
      .execute();
    for (const r of rows) out.set(r.webhook_id, { ...(out.get(r.webhook_id) ?? {}), [r.state]: Number(r.n) });
    return out;
  }

  /** Remove a webhook of `tenantId` and its deliveries. @returns whether it existed */
  async removeWebhook(tenantId: string, id: string): Promise<boolean> {
    return this.db.transaction().execute(async (trx) => {
      const result = await trx
        .deleteFrom('webhooks')
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .executeTakeFirst();
      if (Number(result.numDeletedRows) === 0) return false;
      await trx.deleteFrom('webhook_deliveries').where('webhook_id', '=', id).execute();
      return true;
    });
  }

  /** Up to `limit` pending deliveries whose next attempt is due at `nowIso`, oldest event first. */
  async dueDeliveries(nowIso: string, limit: number): Promise<DueDelivery[]> {
    const rows = await this.db
      .selectFrom('webhook_deliveries as d')
      .innerJoin('webhooks as w', 'w.id', 'd.webhook_id')
      .innerJoin('events as e', 'e.seq', 'd.event_seq')
      .selectAll('e')
      .select([
        'd.id as d_id',
        'd.attempts as d_attempts',
        'w.id as w_id',
        'w.tenant_id as w_tenant_id',
        'w.url as w_url',
        'w.secret as w_secret',
        'w.types as w_types',
        'w.created_at as w_created_at',
      ])
      .where('d.state', '=', 'pending')
      .where('d.next_attempt_at', '<=', nowIso)
      .orderBy('d.event_seq')
      .limit(limit)
      .execute();
    return rows.map((r) => ({
      id: r.d_id,
      attempts: Number(r.d_attempts),
      webhook: toWebhook({
        id: r.w_id,
        tenant_id: r.w_tenant_id,
        url: r.w_url,
        secret: r.w_secret,
        types: r.w_types,
        created_at: r.w_created_at,
      }),
      event: toEvent(r),
    }));
  }

  /** Record the outcome of one delivery attempt. */
  async recordAttempt(
    id: string,
    outcome: {
      state: 'pending' | 'delivered' | 'failed';
      attempts: number;
      nextAttemptAt: string;
      status: number | null;
      error: string | null;
      at: string;
    },
  ): Promise<void> {
    await this.db
      .updateTable('webhook_deliveries')
      .set({
        state: outcome.state,
        attempts: outcome.attempts,
        next_attempt_at: outcome.nextAttemptAt,
        last_status: outcome.status,
        last_error: outcome.error,
        updated_at: outcome.at,
      })
      .where('id', '=', id)
      .execute();
  }

  /** Deliveries of one webhook, for tests and inspection. */
  async deliveriesOf(
    webhookId: string,
  ): Promise<Array<{ id: string; eventSeq: number; state: string; attempts: number; lastStatus: number | null }>> {
    const rows = await this.db
      .selectFrom('webhook_deliveries')
      .selectAll()
      .where('webhook_id', '=', webhookId)
      .orderBy('event_seq')
      .execute();
    return rows.map((r) => ({
      id: r.id,
      eventSeq: Number(r.event_seq),
      state: r.state,
      attempts: Number(r.attempts),
      lastStatus: r.last_status === null ? null : Number(r.last_status),
    }));
  }
}
