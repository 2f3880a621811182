import type { Kysely, Selectable } from 'kysely';
import type { DB, SnapshotsTable } from './database.js';
import { type EnvCodec, PLAIN_ENV } from './env-sealer.js';
import { runAfterCommit, type WithInTransaction } from './in-transaction.js';
import { QuotaStore } from './quota-store.js';

/** What a sandbox made from a snapshot inherits from the snapshot's source. */
export interface SnapshotSettings {
  env: Record<string, string>;
  cwd: string;
  cpuCount: number;
  memoryMiB: number;
  diskMiB: number;
  autoResume: boolean;
}

/** A snapshot row as the services use it. */
export interface SnapshotRecord {
  id: string;
  tenantId: string;
  name: string | null;
  sandboxId: string;
  template: string;
  templateId: string;
  memory: boolean;
  state: 'creating' | 'ready';
  imageSizeBytes: number;
  diskSizeBytes: number;
  runtimeVersion: string;
  settings: SnapshotSettings;
  createdAt: string;
  /** Retention deadline (ISO-8601), or null. @default null */
  expiresAt?: string | null;
  /** When retention deletes it (ISO-8601), set when its warning event was recorded; null while not warned. */
  retentionDeleteAt?: string | null;
}

/** Settings as stored: `env` is the sealed column value (a string), or a plain object on rows written unsealed. */
type StoredSettings = Omit<SnapshotSettings, 'env'> & { env: string | Record<string, string> };

function toRecord(row: Selectable<SnapshotsTable>, envCodec: EnvCodec): SnapshotRecord {
  const stored = JSON.parse(row.settings) as StoredSettings;
  const env = typeof stored.env === 'string' ? envCodec.open(row.id, stored.env) : stored.env;
  return {
    id: row.id,
    tenantId: row.tenant_id,
    name: row.name,
    sandboxId: row.sandbox_id,
    template: row.template,
    templateId: row.template_id,
    memory: Number(row.memory) === 1,
    state: row.state as SnapshotRecord['state'],
    imageSizeBytes: Number(row.image_size_bytes),
    diskSizeBytes: Number(row.disk_size_bytes),
    runtimeVersion: row.runtime_version,
    settings: { ...stored, env },
    createdAt: row.created_at,
    expiresAt: row.expires_at ?? null,
    retentionDeleteAt: row.retention_delete_at ?? null,
  };
}

/** Snapshot rows. Tenant-facing queries filter by tenant. */
export class SnapshotStore {
  /**
   * @param quotas checks the tenant's snapshot quota inside the insert. @default one over `db`
   * @param envCodec seals the env of the settings with a per-snapshot key, destroyed by {@link remove}.
   *   @default plain JSON
   */
  constructor(
    private readonly db: Kysely<DB>,
    readonly quotas: QuotaStore = new QuotaStore(db),
    private readonly envCodec: EnvCodec = PLAIN_ENV,
  ) {}

  /** @throws when the name is taken (unique index); QuotaExceededError at the tenant's snapshot quota */
  async insert(record: SnapshotRecord): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await this.quotas.guard(trx, record.tenantId, { snapshots: 1 });
      await trx
        .insertInto('snapshots')
        .values({
          id: record.id,
          tenant_id: record.tenantId,
          name: record.name,
          sandbox_id: record.sandboxId,
          template: record.template,
          template_id: record.templateId,
          memory: record.memory ? 1 : 0,
          state: record.state,
          image_size_bytes: record.imageSizeBytes,
          disk_size_bytes: record.diskSizeBytes,
          runtime_version: record.runtimeVersion,
          settings: JSON.stringify({
            ...record.settings,
            env: this.envCodec.seal(record.id, record.settings.env),
          } satisfies StoredSettings),
          created_at: record.createdAt,
          expires_at: record.expiresAt ?? null,
        })
        .execute();
    });
  }

  /**
   * Mark a snapshot durable and record its sizes (and its retention deadline, when given).
   * @param options.also work run in the same transaction (the `snapshot_created` event)
   */
  async markReady(
    id: string,
    sizes: { imageSizeBytes: number; diskSizeBytes: number; runtimeVersion: string },
    options: WithInTransaction & { expiresAt?: string | null | undefined } = {},
  ): Promise<void> {
    await this.write(options, (trx) =>
      trx
        .updateTable('snapshots')
        .set({
          state: 'ready',
          image_size_bytes: sizes.imageSizeBytes,
          disk_size_bytes: sizes.diskSizeBytes,
          runtime_version: sizes.runtimeVersion,
          ...(options.expiresAt === undefined ? {} : { expires_at: options.expiresAt }),
        })
        .where('id', '=', id)
        .execute(),
    );
  }

  /**
   * Run `change`, then `options.also` when `change` touched a row, in one transaction; publish after the commit.
   * @param change returns the driver's result (its affected-row count says whether the row existed)
   */
  private async write(
    options: WithInTransaction,
    change: (trx: Kysely<DB>) => Promise<Array<{ numUpdatedRows?: bigint; numDeletedRows?: bigint }>>,
  ): Promise<void> {
    const { also } = options;
    if (also === undefined) {
      await change(this.db);
      return;
    }
    const publish = await this.db.transaction().execute(async (trx) => {
      const [result] = await change(trx);
      const touched = Number(result?.numUpdatedRows ?? result?.numDeletedRows ?? 0n) > 0;
      return touched ? also(trx) : null;
    });
    runAfterCommit([publish]);
  }

  /** The snapshot named or identified by `ref` of `tenantId`, or null. */
  async find(tenantId: string, ref: string): Promise<SnapshotRecord | null> {
    const row = await this.db
      .selectFrom('snapshots')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where((eb) => eb.or([eb('id', '=', ref), eb('name', '=', ref)]))
      .executeTakeFirst();
    return row === undefined ? null : toRecord(row, this.envCodec);
  }

  /** A tenant's snapshots, oldest first, optionally of one sandbox. */
  async list(tenantId: string, options: { sandboxId?: string | undefined } = {}): Promise<SnapshotRecord[]> {
    let q = this.db.selectFrom('snapshots').selectAll().where('tenant_id', '=', tenantId);
    if (options.sandboxId !== undefined) q = q.where('sandbox_id', '=', options.sandboxId);
    return (await q.orderBy('created_at').orderBy('id').execute()).map((row) => toRecord(row, this.envCodec));
  }

  /** Unnamed snapshots of a sandbox (deleted with it). */
  async unnamedOf(sandboxId: string): Promise<SnapshotRecord[]> {
    const rows = await this.db
      .selectFrom('snapshots')
      .selectAll()
      .where('sandbox_id', '=', sandboxId)
      .where('name', 'is', null)
      .execute();
    return rows.map((row) => toRecord(row, this.envCodec));
  }

  /** Every snapshot of every tenant (the reconciler's view). */
  async listAcrossTenants(): Promise<SnapshotRecord[]> {
    return (await this.db.selectFrom('snapshots').selectAll().execute()).map((row) => toRecord(row, this.envCodec));
  }

  /** Set the retention deadline of snapshot `id` (ISO-8601, or null for none). */
  async setExpiresAt(id: string, expiresAt: string | null): Promise<void> {
    await this.db.updateTable('snapshots').set({ expires_at: expiresAt }).where('id', '=', id).execute();
  }

  /**
   * Record (ISO-8601) or forget (null) when retention deletes snapshot `id`.
   * @param options.also work run in the same transaction (the warning event that announces the deletion)
   */
  async setRetentionDeleteAt(id: string, at: string | null, options: WithInTransaction = {}): Promise<void> {
    await this.write(options, (trx) =>
      trx.updateTable('snapshots').set({ retention_delete_at: at }).where('id', '=', id).execute(),
    );
  }

  /**
   * Remove the row of snapshot `id` and destroy its env key. Idempotent.
   * @param options.also work run in the same transaction (the `snapshot_deleted` event)
   */
  async remove(id: string, options: WithInTransaction = {}): Promise<void> {
    await this.write(options, (trx) => trx.deleteFrom('snapshots').where('id', '=', id).execute());
    // After the commit: a rolled-back removal keeps a snapshot whose env still reads. A crash in between leaves a
    // key without a row, which the startup sweep removes (EnvSealer.sweep).
    this.envCodec.destroy(id);
  }
}
