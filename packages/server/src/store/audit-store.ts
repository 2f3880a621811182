import type { AuditResult } from '@burrow/contract';
import type { Kysely, Selectable } from 'kysely';
import type { AuditLogTable, DB } from './database.js';

/** One audit row. */
export interface AuditRow {
  seq: number;
  at: string;
  tenantId: string | null;
  keyId: string | null;
  keyName: string | null;
  sourceAddress: string;
  requestId: string;
  action: string;
  target: string | null;
  result: AuditResult;
  status: number;
  errorCode: string | null;
  details: Record<string, unknown> | null;
  prevHash: string;
  hash: string;
}

/** Where the chain starts and ends. */
export interface AuditChainState {
  headSeq: number;
  prunedThroughSeq: number;
  prunedHash: string;
}

/** Filters of {@link AuditStore.list}. */
export interface AuditFilter {
  /** null: every tenant. */
  tenantId: string | null;
  afterSeq: number;
  limit: number;
  from?: string | undefined;
  to?: string | undefined;
  keyId?: string | undefined;
  target?: string | undefined;
  result?: AuditResult | undefined;
  actionPrefix?: string | undefined;
}

function toRow(r: Selectable<AuditLogTable>): AuditRow {
  return {
    seq: Number(r.seq),
    at: r.at,
    tenantId: r.tenant_id,
    keyId: r.key_id,
    keyName: r.key_name,
    sourceAddress: r.source_address,
    requestId: r.request_id,
    action: r.action,
    target: r.target,
    result: r.result as AuditResult,
    status: Number(r.status),
    errorCode: r.error_code,
    details: r.details === null ? null : (JSON.parse(r.details) as Record<string, unknown>),
    prevHash: r.prev_hash,
    hash: r.hash,
  };
}

/** The `audit_log` and `audit_state` tables. Rows are only ever appended, and removed only by retention. */
export class AuditStore {
  constructor(private readonly db: Kysely<DB>) {}

  /** The chain's state; all zeros (and the zero hash) before the first record. */
  async state(zeroHash: string): Promise<AuditChainState> {
    const row = await this.db.selectFrom('audit_state').selectAll().where('id', '=', 1).executeTakeFirst();
    if (row === undefined) return { headSeq: 0, prunedThroughSeq: 0, prunedHash: zeroHash };
    return {
      headSeq: Number(row.head_seq),
      prunedThroughSeq: Number(row.pruned_through_seq),
      prunedHash: row.pruned_hash,
    };
  }

  /** The newest record, or null. */
  async last(): Promise<AuditRow | null> {
    const row = await this.db.selectFrom('audit_log').selectAll().orderBy('seq', 'desc').limit(1).executeTakeFirst();
    return row === undefined ? null : toRow(row);
  }

  /** Append `row` and move the head to it, in one transaction. */
  async append(row: AuditRow, zeroHash: string): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await trx
        .insertInto('audit_log')
        .values({
          seq: row.seq,
          at: row.at,
          tenant_id: row.tenantId,
          key_id: row.keyId,
          key_name: row.keyName,
          source_address: row.sourceAddress,
          request_id: row.requestId,
          action: row.action,
          target: row.target,
          result: row.result,
          status: row.status,
          error_code: row.errorCode,
          details: row.details === null ? null : JSON.stringify(row.details),
          prev_hash: row.prevHash,
          hash: row.hash,
        })
        .execute();
      const updated = await trx
        .updateTable('audit_state')
        .set({ head_seq: row.seq })
        .where('id', '=', 1)
        .executeTakeFirst();
      if (Number(updated.numUpdatedRows) === 0) {
        await trx
          .insertInto('audit_state')
          .values({ id: 1, head_seq: row.seq, pruned_through_seq: 0, pruned_hash: zeroHash })
          .execute();
      }
    });
  }

  /** Records matching `filter`, oldest first. */
  async list(filter: AuditFilter): Promise<AuditRow[]> {
    let q = this.db.selectFrom('audit_log').selectAll().where('seq', '>', filter.afterSeq);
    if (filter.tenantId !== null) q = q.where('tenant_id', '=', filter.tenantId);
    if (filter.from !== undefined) q = q.where('at', '>=', filter.from);
    if (filter.to !== undefined) q = q.where('at', '<', filter.to);
    if (filter.keyId !== undefined) q = q.where('key_id', '=', filter.keyId);
    if (filter.target !== undefined) q = q.where('target', '=', filter.target);
    if (filter.result !== undefined) q = q.where('result', '=', filter.result);
    if (filter.actionPrefix !== undefined) {
      const prefix = filter.actionPrefix;
      q = q.where((eb) => eb.and([eb('action', '>=', prefix), eb('action', '<', `${prefix}\u{10ffff}`)]));
    }
    const rows = await q.orderBy('seq').limit(filter.limit).execute();
    return rows.map(toRow);
  }

  /** Every record from `afterSeq` on, oldest first, `limit` at a time (the verifier's walk). */
  async page(afterSeq: number, limit: number): Promise<AuditRow[]> {
    const rows = await this.db
      .selectFrom('audit_log')
      .selectAll()
      .where('seq', '>', afterSeq)
      .orderBy('seq')
      .limit(limit)
      .execute();
    return rows.map(toRow);
  }

  /**
   * Remove the records older than `before` and anchor the chain at the newest removed one, in one transaction.
   * @returns how many records were removed
   */
  async prune(before: string): Promise<number> {
    return this.db.transaction().execute(async (trx) => {
      const newest = await trx
        .selectFrom('audit_log')
        .select(['seq', 'hash'])
        .where('at', '<', before)
        .orderBy('seq', 'desc')
        .limit(1)
        .executeTakeFirst();
      if (newest === undefined) return 0;
      const seq = Number(newest.seq);
      await trx
        .updateTable('audit_state')
        .set({ pruned_through_seq: seq, pruned_hash: newest.hash })
        .where('id', '=', 1)
        .execute();
      const removed = await trx.deleteFrom('audit_log').where('seq', '<=', seq).executeTakeFirst();
      return Number(removed.numDeletedRows);
    });
  }
}
