import { createHash } from 'node:crypto';
import type { AuditRecord, AuditResult, AuditVerify } from '@burrow/contract';
import { ErrorCode } from '@burrow/contract';
import type { Logger } from 'pino';
import type { AuditRow, AuditStore } from '../store/audit-store.js';
import { ApiError } from '../util/api-error.js';
import type { Clock } from '../util/clock.js';
import type { Principal } from './key-service.js';

/** The `prevHash` of the first record. */
export const AUDIT_ZERO_HASH = '0'.repeat(64);
/** Records the verifier reads at a time. */
const VERIFY_PAGE = 1000;

/** What the HTTP layer reports of one request. */
export interface AuditEntry {
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
}

/**
 * The hash of a record: sha256 over its fields (in a fixed order, as JSON) and the previous record's hash, so that
 * editing, removing or reordering a record breaks the chain from there on.
 */
export function auditHash(row: Omit<AuditRow, 'hash'>): string {
  const fields = [
    row.seq,
    row.at,
    row.tenantId,
    row.keyId,
    row.keyName,
    row.sourceAddress,
    row.requestId,
    row.action,
    row.target,
    row.result,
    row.status,
    row.errorCode,
    row.details === null ? null : JSON.stringify(row.details),
    row.prevHash,
  ];
  return createHash('sha256').update(JSON.stringify(fields), 'utf8').digest('hex');
}

function toRecord(row: AuditRow): AuditRecord {
  const { seq, ...rest } = row;
  return { id: String(seq), ...rest };
}

/** Query of {@link AuditService.list}. */
export interface AuditQuery {
  from?: string | undefined;
  to?: string | undefined;
  tenant?: string | undefined;
  keyId?: string | undefined;
  target?: string | undefined;
  result?: AuditResult | undefined;
  action?: string | undefined;
  limit: number;
  cursor?: string | undefined;
}

/**
 * The audit log: an append-only chain of records, one per changing or refused request. Appends are serialized in
 * this process (one node writes the chain); each is one transaction that also moves the chain's head, so a removed
 * newest record is detected too.
 */
export class AuditService {
  private tail: Promise<void> = Promise.resolve();
  private head: { seq: number; hash: string } | null = null;
  private retentionTimer: NodeJS.Timeout | null = null;

  constructor(private readonly deps: { store: AuditStore; clock: Clock; logger: Logger }) {}

  /** Queue `entry` for appending; never throws (a failure is logged). */
  record(entry: AuditEntry): void {
    this.tail = this.tail.then(
      () => this.append(entry),
      () => this.append(entry),
    );
    this.tail = this.tail.catch((err: unknown) => {
      this.head = null; // read the head again: another writer may have moved it
      this.deps.logger.error({ err, action: entry.action, requestId: entry.requestId }, 'audit record not written');
    });
  }

  /** Resolves once every record queued so far is written (or failed). */
  async flush(): Promise<void> {
    await this.tail;
  }

  private async append(entry: AuditEntry): Promise<void> {
    if (this.head === null) {
      const last = await this.deps.store.last();
      const state = await this.deps.store.state(AUDIT_ZERO_HASH);
      this.head =
        last !== null ? { seq: last.seq, hash: last.hash } : { seq: state.prunedThroughSeq, hash: state.prunedHash };
    }
    const base = {
      ...entry,
      seq: this.head.seq + 1,
      at: new Date(this.deps.clock.nowMs()).toISOString(),
      prevHash: this.head.hash,
    };
    const row: AuditRow = { ...base, hash: auditHash(base) };
    await this.deps.store.append(row, AUDIT_ZERO_HASH);
    this.head = { seq: row.seq, hash: row.hash };
  }

  /**
   * Records the caller may read, oldest first: an admin key every tenant's (or `tenant`'s), any other key its own
   * tenant's.
   * @throws ApiError `forbidden` when a non-admin key names another tenant
   */
  async list(caller: Principal, query: AuditQuery): Promise<{ items: AuditRecord[]; nextCursor: string | null }> {
    if (query.tenant !== undefined && query.tenant !== caller.tenantId && caller.role !== 'admin') {
      throw new ApiError(ErrorCode.forbidden, `reading tenant ${query.tenant}'s audit log needs an admin key`, {
        hint: `a key reads its own tenant's log (${caller.tenantId})`,
      });
    }
    const tenantId = query.tenant ?? (caller.role === 'admin' ? null : caller.tenantId);
    const rows = await this.deps.store.list({
      tenantId,
      afterSeq: query.cursor === undefined ? 0 : Number(query.cursor),
      limit: query.limit,
      from: query.from,
      to: query.to,
      keyId: query.keyId,
      target: query.target,
      result: query.result,
      actionPrefix: query.action,
    });
    const items = rows.map(toRecord);
    return { items, nextCursor: items.at(-1)?.id ?? null };
  }

  /**
   * Walk the whole chain from the retention anchor to the head and name every record that was edited, removed or
   * reordered. Admin only.
   * @throws ApiError `forbidden` for a non-admin key
   */
  async verify(caller: Principal): Promise<AuditVerify> {
    if (caller.role !== 'admin') {
      throw new ApiError(ErrorCode.forbidden, 'verifying the audit log needs an admin key', {
        hint: 'use the admin key (<dataDir>/admin-key)',
      });
    }
    await this.flush();
    const state = await this.deps.store.state(AUDIT_ZERO_HASH);
    const problems: AuditVerify['problems'] = [];
    let expectedSeq = state.prunedThroughSeq + 1;
    let expectedPrev = state.prunedHash;
    let checked = 0;
    for (;;) {
      const rows = await this.deps.store.page(expectedSeq - 1, VERIFY_PAGE);
      for (const row of rows) {
        checked++;
        const { hash, ...rest } = row;
        if (row.seq > expectedSeq) {
          const missing = row.seq - 1 === expectedSeq ? `${expectedSeq}` : `${expectedSeq}–${row.seq - 1}`;
          problems.push({ id: String(expectedSeq), kind: 'removed', message: `record ${missing} is missing` });
        } else if (row.prevHash !== expectedPrev) {
          const before = String(row.seq - 1);
          problems.push({
            id: before,
            kind: 'edited',
            message: `record ${before} was changed and hashed again: record ${row.seq} chains to another hash`,
          });
        }
        if (auditHash(rest) !== hash) {
          problems.push({ id: String(row.seq), kind: 'edited', message: `record ${row.seq} was changed` });
        }
        expectedSeq = row.seq + 1;
        expectedPrev = hash;
      }
      if (rows.length < VERIFY_PAGE) break;
    }
    if (state.headSeq >= expectedSeq) {
      const missing = state.headSeq === expectedSeq ? `${expectedSeq}` : `${expectedSeq}–${state.headSeq}`;
      problems.push({ id: String(expectedSeq), kind: 'removed', message: `record ${missing} is missing` });
    }
    return {
      ok: problems.length === 0,
      checked,
      prunedThrough: state.prunedThroughSeq === 0 ? null : String(state.prunedThroughSeq),
      problems,
    };
  }

  /**
   * Remove records older than `retentionMs` (the chain stays verifiable: its anchor moves to the newest removed).
   * @returns how many were removed
   */
  async prune(retentionMs: number): Promise<number> {
    await this.flush();
    const before = new Date(this.deps.clock.nowMs() - retentionMs).toISOString();
    const removed = await this.deps.store.prune(before);
    if (removed > 0) this.deps.logger.info({ removed, before }, 'audit records past retention removed');
    return removed;
  }

  /**
   * Prune past `retentionMs` now and every `intervalMs` (null retention: keep forever, no loop).
   * @param intervalMs @default 3_600_000 (1 hour)
   */
  startRetention(retentionMs: number | null, intervalMs = 3_600_000): void {
    if (retentionMs === null || this.retentionTimer !== null) return;
    const run = () => {
      this.prune(retentionMs).catch((err: unknown) => this.deps.logger.error({ err }, 'audit retention failed'));
    };
    run();
    this.retentionTimer = setInterval(run, intervalMs);
    this.retentionTimer.unref();
  }

  /** Stop the retention loop and wait for queued records. */
  async close(): Promise<void> {
    if (this.retentionTimer !== null) clearInterval(this.retentionTimer);
    this.retentionTimer = null;
    await this.flush();
  }
}
