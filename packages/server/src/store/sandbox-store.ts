import type { Condition, DesiredState, SandboxState } from '@burrow/contract';
import type { Kysely, Selectable } from 'kysely';
import type { PageCursor } from '../util/cursor.js';
import type { DB, SandboxesTable } from './database.js';

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
export type SandboxPatch = Partial<Pick<SandboxRecord, 'state' | 'conditions' | 'desiredState'>>;

function toRecord(row: Selectable<SandboxesTable>): SandboxRecord {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    template: row.template,
    templateId: row.template_id,
    state: row.state as SandboxState,
    conditions: JSON.parse(row.conditions) as Condition[],
    env: JSON.parse(row.env) as Record<string, string>,
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
  };
}

/** Sandbox rows. Every tenant-facing query filters by tenant; `*AcrossTenants` methods are for the reconciler. */
export class SandboxStore {
  constructor(private readonly db: Kysely<DB>) {}

  /** Insert a new sandbox and its labels in one transaction. */
  async insert(record: SandboxRecord): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await trx
        .insertInto('sandboxes')
        .values({
          id: record.id,
          tenant_id: record.tenantId,
          template: record.template,
          template_id: record.templateId,
          state: record.state,
          conditions: JSON.stringify(record.conditions),
          env: JSON.stringify(record.env),
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
        })
        .execute();
      const labels = Object.entries(record.labels);
      if (labels.length > 0) {
        await trx
          .insertInto('sandbox_labels')
          .values(labels.map(([key, value]) => ({ tenant_id: record.tenantId, sandbox_id: record.id, key, value })))
          .execute();
      }
    });
  }

  /** The sandbox `id` of `tenantId`, or null (also for another tenant's id). */
  async get(tenantId: string, id: string): Promise<SandboxRecord | null> {
    const row = await this.db
      .selectFrom('sandboxes')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('id', '=', id)
      .executeTakeFirst();
    return row === undefined ? null : toRecord(row);
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
    return rows.map(toRecord);
  }

  /**
   * Apply `patch` if the row is still at `expectedVersion`.
   * @returns the updated record, or null when the row changed or vanished meanwhile
   */
  async update(
    tenantId: string,
    id: string,
    expectedVersion: number,
    patch: SandboxPatch,
    updatedAt: string,
  ): Promise<SandboxRecord | null> {
    const result = await this.db
      .updateTable('sandboxes')
      .set({
        ...(patch.state === undefined ? {} : { state: patch.state }),
        ...(patch.conditions === undefined ? {} : { conditions: JSON.stringify(patch.conditions) }),
        ...(patch.desiredState === undefined ? {} : { desired_state: patch.desiredState }),
        updated_at: updatedAt,
        version: expectedVersion + 1,
      })
      .where('tenant_id', '=', tenantId)
      .where('id', '=', id)
      .where('version', '=', expectedVersion)
      .executeTakeFirst();
    if (Number(result.numUpdatedRows) !== 1) return null;
    return this.get(tenantId, id);
  }

  /** Remove the row and its labels. Idempotent. */
  async remove(tenantId: string, id: string): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await trx.deleteFrom('sandbox_labels').where('tenant_id', '=', tenantId).where('sandbox_id', '=', id).execute();
      await trx.deleteFrom('sandboxes').where('tenant_id', '=', tenantId).where('id', '=', id).execute();
    });
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
    return rows.map(toRecord);
  }

  /** The sandbox `id` whatever its tenant (the reconciler's view). */
  async getAcrossTenants(id: string): Promise<SandboxRecord | null> {
    const row = await this.db.selectFrom('sandboxes').selectAll().where('id', '=', id).executeTakeFirst();
    return row === undefined ? null : toRecord(row);
  }
}
