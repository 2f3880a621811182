import type { Condition, DesiredState, NetworkPolicy, Quarantine, SandboxState, TimeoutAction } from '@burrow/contract';
import type { Kysely, Selectable } from 'kysely';
import { resumedTimeoutAt } from '../lifecycle/policy-defaults.js';
import type { PageCursor } from '../util/cursor.js';
import type { DB, SandboxesTable } from './database.js';
import { type EnvCodec, PLAIN_ENV } from './env-sealer.js';
import type { WithInTransaction } from './in-transaction.js';
import { revokeKeysOfSandbox } from './key-store.js';
import { QuotaStore, RUNNING_QUOTA_STATES } from './quota-store.js';

/** Conditions a row keeps: the newest ones. */
const MAX_CONDITIONS = 20;

/** Append conditions to a row's list, keeping the newest {@link MAX_CONDITIONS}. */
export function withConditions(existing: Condition[], added: Condition[]): Condition[] {
  return [...existing, ...added].slice(-MAX_CONDITIONS);
}

/** Lifecycle policy columns of a sandbox (0300) and the reconciler's bookkeeping for them. */
export interface SandboxLifecycle {
  /** What the TTL does. @default 'delete' */
  timeoutAction: TimeoutAction;
  idleTimeoutMs: number | null;
  maxAgeMs: number | null;
  pausedRetentionMs: number | null;
  snapshotKeepLast: number | null;
  /** When the sandbox became paused (set by {@link SandboxStore.update} on a move to `paused`), or null. */
  pausedAt: string | null;
  /** The deletion deadline the last warning event was about (ISO-8601), or null. */
  expiryWarnedFor: string | null;
  /** When that warning was recorded, or null. */
  expiryWarnedAt: string | null;
  /** Where each policy's value comes from (`request`, `tenant-default`, `server-default`); null on rows made before 2400. */
  policySources?: Record<string, string> | null | undefined;
}

/** Lifecycle fields of a row that has none set (rows from before 0300, or records built without them). */
export const DEFAULT_LIFECYCLE: SandboxLifecycle = {
  timeoutAction: 'delete',
  idleTimeoutMs: null,
  maxAgeMs: null,
  pausedRetentionMs: null,
  snapshotKeepLast: null,
  pausedAt: null,
  expiryWarnedFor: null,
  expiryWarnedAt: null,
  policySources: null,
};

/** A sandbox row as the services use it (JSON columns parsed). */
export interface SandboxRecord {
  id: string;
  tenantId: string;
  template: string;
  templateId: string;
  state: SandboxState;
  conditions: Condition[];
  env: Record<string, string>;
  labels: Record<string, string>;
  cwd: string;
  hostname: string;
  cpuCount: number;
  memoryMiB: number;
  diskMiB: number;
  timeoutMs: number | null;
  expiresAt: string | null;
  createdAt: string;
  updatedAt: string;
  version: number;
  desiredState: DesiredState;
  autoResume: boolean;
  parentId: string | null;
  snapshotId: string | null;
  /** Set while quarantined (absent on records built before 0400: not quarantined). */
  quarantine?: Quarantine | null;
  /** Policies beyond `timeoutMs`; rows read from the store always carry them. @default DEFAULT_LIFECYCLE */
  lifecycle?: SandboxLifecycle;
  /** The network policy in force (absent on records built without one, null on rows from before 0500: none). */
  network?: NetworkPolicy | null;
}

/** Filters and page of {@link SandboxStore.list}. */
export interface ListSandboxesOptions {
  state?: SandboxState | undefined;
  /** Every pair must match (AND). */
  labels: Array<[string, string]>;
  limit: number;
  after?: PageCursor | null | undefined;
  /** Only children of this sandbox. */
  parentId?: string | undefined;
}

/** Fields a fenced update may change. */
export type SandboxPatch = Partial<
  Pick<SandboxRecord, 'state' | 'conditions' | 'desiredState' | 'timeoutMs' | 'expiresAt' | 'env' | 'network'>
> & {
  lifecycle?: Partial<SandboxLifecycle>;
} & ResetPatch;

/** Fields a quarantine or a reset (to a snapshot of another template or size) changes. */
export type ResetPatch = Partial<
  Pick<SandboxRecord, 'quarantine' | 'template' | 'templateId' | 'cpuCount' | 'memoryMiB' | 'diskMiB' | 'snapshotId'>
>;

/** Columns of {@link SandboxLifecycle} fields. */
function lifecycleColumns(l: Partial<SandboxLifecycle>): Partial<SandboxesTable> {
  const out: Partial<SandboxesTable> = {};
  if (l.timeoutAction !== undefined) out.timeout_action = l.timeoutAction;
  if (l.idleTimeoutMs !== undefined) out.idle_timeout_ms = l.idleTimeoutMs;
  if (l.maxAgeMs !== undefined) out.max_age_ms = l.maxAgeMs;
  if (l.pausedRetentionMs !== undefined) out.paused_retention_ms = l.pausedRetentionMs;
  if (l.snapshotKeepLast !== undefined) out.snapshot_keep_last = l.snapshotKeepLast;
  if (l.pausedAt !== undefined) out.paused_at = l.pausedAt;
  if (l.expiryWarnedFor !== undefined) out.expiry_warned_for = l.expiryWarnedFor;
  if (l.expiryWarnedAt !== undefined) out.expiry_warned_at = l.expiryWarnedAt;
  if (l.policySources !== undefined) {
    out.policy_sources = l.policySources === null ? null : JSON.stringify(l.policySources);
  }
  return out;
}

const num = (v: number | null | undefined): number | null => (v === null || v === undefined ? null : Number(v));

function toRecord(row: Selectable<SandboxesTable>, envCodec: EnvCodec): SandboxRecord {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    template: row.template,
    templateId: row.template_id,
    state: row.state as SandboxState,
    conditions: JSON.parse(row.conditions) as Condition[],
    env: envCodec.open(row.id, row.env),
    labels: JSON.parse(row.labels) as Record<string, string>,
    cwd: row.cwd,
    hostname: row.hostname,
    cpuCount: Number(row.cpu_count),
    memoryMiB: Number(row.memory_mib),
    diskMiB: Number(row.disk_mib),
    timeoutMs: row.timeout_ms === null ? null : Number(row.timeout_ms),
    expiresAt: row.expires_at,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    version: Number(row.version),
    desiredState: (row.desired_state ?? 'running') as DesiredState,
    autoResume: row.auto_resume === null ? true : Number(row.auto_resume) === 1,
    parentId: row.parent_id,
    snapshotId: row.snapshot_id,
    quarantine: row.quarantine ? (JSON.parse(row.quarantine) as Quarantine) : null,
    network: row.network ? (JSON.parse(row.network) as NetworkPolicy) : null,
    lifecycle: {
      timeoutAction: (row.timeout_action ?? 'delete') as TimeoutAction,
      idleTimeoutMs: num(row.idle_timeout_ms),
      maxAgeMs: num(row.max_age_ms),
      pausedRetentionMs: num(row.paused_retention_ms),
      snapshotKeepLast: num(row.snapshot_keep_last),
      pausedAt: row.paused_at ?? null,
      expiryWarnedFor: row.expiry_warned_for ?? null,
      expiryWarnedAt: row.expiry_warned_at ?? null,
      policySources: row.policy_sources ? (JSON.parse(row.policy_sources) as Record<string, string>) : null,
    },
  };
}

/**
 * Observer of sandbox state changes, called inside the transaction of the write that makes the change, with the
 * row before and after (null: removed). Whatever it writes through `trx` commits or rolls back with the change.
 * @returns a callback run after the commit (for example to publish the stored event), or null
 */
export type TransitionHook = (
  trx: Kysely<DB>,
  before: SandboxRecord,
  after: SandboxRecord | null,
) => Promise<(() => void) | null>;

/** Sandbox rows. Every tenant-facing query filters by tenant; `*AcrossTenants` methods are for the reconciler. */
export class SandboxStore {
  /**
   * @param quotas checks tenant quotas inside the insert (and resume) transactions. @default one over `db`
   * @param envCodec seals env values with a per-sandbox key, destroyed by {@link remove}. @default plain JSON
   */
  constructor(
    private readonly db: Kysely<DB>,
    readonly quotas: QuotaStore = new QuotaStore(db),
    readonly envCodec: EnvCodec = PLAIN_ENV,
  ) {}

  /**
   * Called for each state change a write makes, INSIDE the write's transaction (the event recorder sets this and
   * appends the event there, so a crash keeps both or neither); null: nobody listens. See {@link TransitionHook}.
   */
  onTransition: TransitionHook | null = null;

  /** Run each hook's after-commit callback; a throwing callback must not turn a committed write into an error. */
  private static published(callbacks: ReadonlyArray<(() => void) | null>): void {
    for (const callback of callbacks) {
      try {
        callback?.();
      } catch {
        // The write is committed; a listener's failure is its own.
      }
    }
  }

  /**
   * Insert a new sandbox and its labels in one transaction, within the tenant's quotas.
   * @throws QuotaExceededError when the tenant's running, sandbox or disk quota would be passed (nothing written)
   */
  async insert(record: SandboxRecord, options: WithInTransaction = {}): Promise<void> {
    const after = await this.db.transaction().execute(async (trx) => {
      await this.quotas.guard(trx, record.tenantId, {
        sandboxes: 1,
        running: RUNNING_QUOTA_STATES.includes(record.state as (typeof RUNNING_QUOTA_STATES)[number]) ? 1 : 0,
        diskBytes: QuotaStore.diskBytes(record.diskMiB),
      });
      await trx
        .insertInto('sandboxes')
        .values({
          id: record.id,
          tenant_id: record.tenantId,
          template: record.template,
          template_id: record.templateId,
          state: record.state,
          conditions: JSON.stringify(record.conditions),
          env: this.envCodec.seal(record.id, record.env),
          labels: JSON.stringify(record.labels),
          cwd: record.cwd,
          hostname: record.hostname,
          cpu_count: record.cpuCount,
          memory_mib: record.memoryMiB,
          disk_mib: record.diskMiB,
          timeout_ms: record.timeoutMs,
          expires_at: record.expiresAt,
          created_at: record.createdAt,
          updated_at: record.updatedAt,
          version: record.version,
          desired_state: record.desiredState,
          auto_resume: record.autoResume ? 1 : 0,
          parent_id: record.parentId,
          snapshot_id: record.snapshotId,
          quarantine: record.quarantine ? JSON.stringify(record.quarantine) : null,
          network: record.network ? JSON.stringify(record.network) : null,
          ...lifecycleColumns(record.lifecycle ?? DEFAULT_LIFECYCLE),
        })
        .execute();
      const labels = Object.entries(record.labels);
      if (labels.length > 0) {
        await trx
          .insertInto('sandbox_labels')
          .values(labels.map(([key, value]) => ({ tenant_id: record.tenantId, sandbox_id: record.id, key, value })))
          .execute();
      }
      return options.also === undefined ? null : await options.also(trx);
    });
    SandboxStore.published([after]);
  }

  /** The sandbox `id` of `tenantId`, or null (also for another tenant's id). */
  async get(tenantId: string, id: string): Promise<SandboxRecord | null> {
    return this.getIn(this.db, tenantId, id);
  }

  /** {@link get} on `db` (a transaction, to read inside it). */
  private async getIn(db: Kysely<DB>, tenantId: string, id: string): Promise<SandboxRecord | null> {
    const row = await db
      .selectFrom('sandboxes')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('id', '=', id)
      .executeTakeFirst();
    return row === undefined ? null : toRecord(row, this.envCodec);
  }

  /** One page of a tenant's sandboxes in (createdAt, id) order, `deleted` ones excluded. */
  async list(tenantId: string, options: ListSandboxesOptions): Promise<SandboxRecord[]> {
    let q = this.db
      .selectFrom('sandboxes')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('state', '!=', 'deleted');
    if (options.state !== undefined) q = q.where('state', '=', options.state);
    if (options.parentId !== undefined) q = q.where('parent_id', '=', options.parentId);
    for (const [key, value] of options.labels) {
      q = q.where(({ exists, selectFrom }) =>
        exists(
          selectFrom('sandbox_labels')
            .select('sandbox_labels.key')
            .whereRef('sandbox_labels.sandbox_id', '=', 'sandboxes.id')
            .where('sandbox_labels.tenant_id', '=', tenantId)
            .where('sandbox_labels.key', '=', key)
            .where('sandbox_labels.value', '=', value),
        ),
      );
    }
    const after = options.after;
    if (after) {
      q = q.where((eb) =>
        eb.or([
          eb('created_at', '>', after.createdAt),
          eb.and([eb('created_at', '=', after.createdAt), eb('id', '>', after.id)]),
        ]),
      );
    }
    const rows = await q.orderBy('created_at').orderBy('id').limit(options.limit).execute();
    return rows.map((row) => toRecord(row, this.envCodec));
  }

  /**
   * Apply `patch` if the row is still at `expectedVersion`.
   * @param options.also work run in the same transaction after the change (the event that reports it), not run
   *   when the write is fenced; a throw from it rolls the change back
   * @returns the updated record, or null when the row changed or vanished meanwhile
   */
  async update(
    tenantId: string,
    id: string,
    expectedVersion: number,
    patch: SandboxPatch,
    updatedAt: string,
    options: WithInTransaction = {},
  ): Promise<SandboxRecord | null> {
    const hook = patch.state !== undefined ? this.onTransition : null;
    // Leaving paused or stopped for `resuming` takes a running slot: checked with the write, under the quota lock.
    const outcome = await this.db.transaction().execute(async (trx) => {
      if (patch.state === 'resuming') await this.quotas.guard(trx, tenantId, { running: 1 });
      const leavingPause = patch.state === 'running' && patch.expiresAt === undefined;
      const before = hook === null && !leavingPause ? null : await this.getIn(trx, tenantId, id);
      // The TTL counts running time: back to running, its deadline moves later by the time spent paused.
      const resumedExpiry = leavingPause && before !== null ? resumedExpiresAt(before, updatedAt) : undefined;
      const result = await trx
        .updateTable('sandboxes')
        .set({
          ...(patch.state === undefined ? {} : { state: patch.state }),
          ...(patch.conditions === undefined ? {} : { conditions: JSON.stringify(patch.conditions) }),
          ...(patch.desiredState === undefined ? {} : { desired_state: patch.desiredState }),
          ...(patch.env === undefined ? {} : { env: this.envCodec.seal(id, patch.env) }),
          ...(patch.quarantine === undefined
            ? {}
            : { quarantine: patch.quarantine === null ? null : JSON.stringify(patch.quarantine) }),
          ...(patch.template === undefined ? {} : { template: patch.template }),
          ...(patch.templateId === undefined ? {} : { template_id: patch.templateId }),
          ...(patch.cpuCount === undefined ? {} : { cpu_count: patch.cpuCount }),
          ...(patch.memoryMiB === undefined ? {} : { memory_mib: patch.memoryMiB }),
          ...(patch.diskMiB === undefined ? {} : { disk_mib: patch.diskMiB }),
          ...(patch.snapshotId === undefined ? {} : { snapshot_id: patch.snapshotId }),
          ...(patch.network === undefined ? {} : { network: patch.network ? JSON.stringify(patch.network) : null }),
          ...(patch.timeoutMs === undefined ? {} : { timeout_ms: patch.timeoutMs }),
          ...(patch.expiresAt === undefined ? {} : { expires_at: patch.expiresAt }),
          ...(resumedExpiry === undefined ? {} : { expires_at: resumedExpiry }),
          // Paused retention counts from the move to paused; any other settled state ends it.
          ...(patch.state === 'paused' ? { paused_at: updatedAt } : {}),
          ...(patch.state === 'running' || patch.state === 'stopped' ? { paused_at: null } : {}),
          ...lifecycleColumns(patch.lifecycle ?? {}),
          updated_at: updatedAt,
          version: expectedVersion + 1,
        })
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .where('version', '=', expectedVersion)
        .executeTakeFirst();
      if (Number(result.numUpdatedRows) !== 1) return null;
      const after = await this.getIn(trx, tenantId, id);
      const publish =
        hook !== null && before !== null && after !== null && before.state !== after.state
          ? await hook(trx, before, after)
          : null;
      const also = options.also === undefined ? null : await options.also(trx);
      return { after, publish, also };
    });
    if (outcome === null) return null;
    SandboxStore.published([outcome.publish, outcome.also]);
    return outcome.after;
  }

  /**
   * Set `state` on several rows in one transaction, each fenced by its version: all rows change or none does.
   * @returns the updated records in the order given, or null (nothing changed) when any row changed or vanished
   */
  async updateStates(
    rows: ReadonlyArray<{ tenantId: string; id: string; expectedVersion: number }>,
    state: SandboxState,
    updatedAt: string,
  ): Promise<SandboxRecord[] | null> {
    const fenced = new Error('fenced');
    const hook = this.onTransition;
    try {
      const { updated, publish } = await this.db.transaction().execute(async (trx) => {
        const before: SandboxRecord[] = [];
        for (const row of rows) {
          const record = hook === null ? null : await this.getIn(trx, row.tenantId, row.id);
          if (record !== null) before.push(record);
        }
        for (const row of rows) {
          const current = state === 'running' ? await this.getIn(trx, row.tenantId, row.id) : null;
          const resumedExpiry = current === null ? undefined : resumedExpiresAt(current, updatedAt);
          const result = await trx
            .updateTable('sandboxes')
            .set({
              state,
              ...(resumedExpiry === undefined ? {} : { expires_at: resumedExpiry }),
              updated_at: updatedAt,
              version: row.expectedVersion + 1,
              ...(state === 'paused' ? { paused_at: updatedAt } : {}),
              ...(state === 'running' || state === 'stopped' ? { paused_at: null } : {}),
            })
            .where('tenant_id', '=', row.tenantId)
            .where('id', '=', row.id)
            .where('version', '=', row.expectedVersion)
            .executeTakeFirst();
          if (Number(result.numUpdatedRows) !== 1) throw fenced;
        }
        const updated: SandboxRecord[] = [];
        const publish: Array<(() => void) | null> = [];
        for (const row of rows) {
          const record = await this.getIn(trx, row.tenantId, row.id);
          if (record === null) throw fenced;
          updated.push(record);
          const previous = before.find((b) => b.id === record.id);
          if (hook !== null && previous !== undefined && previous.state !== record.state)
            publish.push(await hook(trx, previous, record));
        }
        return { updated, publish };
      });
      SandboxStore.published(publish);
      return updated;
    } catch (error) {
      if (error === fenced) return null;
      throw error;
    }
  }

  /**
   * Remove the row, its labels, volume mounts and secret bindings, and destroy its env key first: the ciphertext every copy of the row holds
   * (free pages, WAL, dead tuples) is unreadable from then on. Keys restricted to this sandbox are revoked in the
   * same transaction. Idempotent.
   * @param removedAt when the keys count as revoked @default the host's current time
   */
  async remove(tenantId: string, id: string, removedAt: string = new Date().toISOString()): Promise<void> {
    this.envCodec.destroy(id);
    const hook = this.onTransition;
    const publish = await this.db.transaction().execute(async (trx) => {
      const before = hook === null ? null : await this.getIn(trx, tenantId, id);
      await trx.deleteFrom('sandbox_labels').where('tenant_id', '=', tenantId).where('sandbox_id', '=', id).execute();
      await trx.deleteFrom('volume_mounts').where('tenant_id', '=', tenantId).where('sandbox_id', '=', id).execute();
      await trx.deleteFrom('sandbox_secrets').where('tenant_id', '=', tenantId).where('sandbox_id', '=', id).execute();
      await trx.deleteFrom('sandboxes').where('tenant_id', '=', tenantId).where('id', '=', id).execute();
      await revokeKeysOfSandbox(trx, id, removedAt);
      return hook !== null && before !== null ? hook(trx, before, null) : null;
    });
    SandboxStore.published([publish]);
  }

  /** Whether any sandbox of `tenantId` uses template `name`. */
  async usesTemplate(tenantId: string, name: string): Promise<boolean> {
    const row = await this.db
      .selectFrom('sandboxes')
      .select('id')
      .where('tenant_id', '=', tenantId)
      .where('template', '=', name)
      .limit(1)
      .executeTakeFirst();
    return row !== undefined;
  }

  /** Every sandbox row of every tenant (the reconciler's view; single node, so the table stays small). */
  async listAcrossTenants(): Promise<SandboxRecord[]> {
    const rows = await this.db.selectFrom('sandboxes').selectAll().orderBy('created_at').execute();
    return rows.map((row) => toRecord(row, this.envCodec));
  }

  /** The sandbox `id` whatever its tenant (the reconciler's view). */
  async getAcrossTenants(id: string): Promise<SandboxRecord | null> {
    const row = await this.db.selectFrom('sandboxes').selectAll().where('id', '=', id).executeTakeFirst();
    return row === undefined ? null : toRecord(row, this.envCodec);
  }
}

/**
 * The TTL deadline of a row moving back to running at `updatedAt`: later by the time it spent paused.
 * @returns the new `expires_at`, or undefined when it stays (no TTL, or the row was not paused)
 */
function resumedExpiresAt(before: SandboxRecord, updatedAt: string): string | undefined {
  const pausedAt = before.lifecycle?.pausedAt ?? null;
  if (before.expiresAt === null || pausedAt === null) return undefined;
  const atMs = resumedTimeoutAt(Date.parse(before.expiresAt), Date.parse(pausedAt), Date.parse(updatedAt));
  return atMs === null ? undefined : new Date(atMs).toISOString();
}
