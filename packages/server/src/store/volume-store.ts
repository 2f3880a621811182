import { type Kysely, PostgresAdapter } from 'kysely';
import type { PageCursor } from '../util/cursor.js';
import type { DB, VolumesTable } from './database.js';
import { QuotaStore } from './quota-store.js';

/** A volume row. */
export interface VolumeRecord {
  id: string;
  tenantId: string;
  name: string;
  kind: 'volume' | 'snapshot';
  sizeMiB: number;
  labels: Record<string, string>;
  shared: boolean;
  /** `creating` until its storage exists, `ready`, `deleting` while it goes. */
  state: 'creating' | 'ready' | 'deleting';
  sourceId: string | null;
  copyMethod: 'reflink' | 'sparse-copy' | null;
  expiresAt: string | null;
  createdAt: string;
  updatedAt: string;
}

/** A mount row: sandbox `sandboxId` mounts `volumeId` at `path`. */
export interface VolumeMountRecord {
  sandboxId: string;
  volumeId: string;
  tenantId: string;
  path: string;
  readOnly: boolean;
  position: number;
}

/** Options of {@link VolumeStore.list}. */
export interface ListVolumesOptions {
  kind?: 'volume' | 'snapshot' | undefined;
  sourceId?: string | undefined;
  labels: Array<[string, string]>;
  after?: PageCursor | null | undefined;
  limit: number;
}

/** A name already taken by another volume of the tenant; nothing was written. */
export class VolumeNameTakenError extends Error {
  constructor(readonly volumeName: string) {
    super(`a volume named ${volumeName} already exists`);
    this.name = 'VolumeNameTakenError';
  }
}

/** A read-write mount of a non-shared volume that another sandbox already mounts read-write; nothing was written. */
export class VolumeMountTakenError extends Error {
  constructor(
    readonly volumeId: string,
    readonly holderSandboxId: string,
  ) {
    super(`volume ${volumeId} is mounted read-write by ${holderSandboxId}`);
    this.name = 'VolumeMountTakenError';
  }
}

const MIB = 1024 * 1024;

function toRecord(row: VolumesTable): VolumeRecord {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    name: row.name,
    kind: row.kind as VolumeRecord['kind'],
    sizeMiB: Number(row.size_mib),
    labels: JSON.parse(row.labels) as Record<string, string>,
    shared: Number(row.shared) === 1,
    state: row.state as VolumeRecord['state'],
    sourceId: row.source_id,
    copyMethod: row.copy_method as VolumeRecord['copyMethod'],
    expiresAt: row.expires_at,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/** Rows of volumes and their mounts. Writes that add bytes or volumes check the tenant's quota in their transaction. */
export class VolumeStore {
  private readonly postgres: boolean;
  private readonly quotas: QuotaStore;

  constructor(private readonly db: Kysely<DB>) {
    this.postgres = db.getExecutor().adapter instanceof PostgresAdapter;
    this.quotas = new QuotaStore(db);
  }

  /**
   * Insert a volume and its labels within the tenant's volume quotas.
   * @throws QuotaExceededError, VolumeNameTakenError (nothing written)
   */
  async insert(record: VolumeRecord): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await this.quotas.guard(trx, record.tenantId, { volumes: 1, volumeBytes: record.sizeMiB * MIB });
      const taken = await trx
        .selectFrom('volumes')
        .select('id')
        .where('tenant_id', '=', record.tenantId)
        .where('name', '=', record.name)
        .executeTakeFirst();
      if (taken !== undefined) throw new VolumeNameTakenError(record.name);
      await trx
        .insertInto('volumes')
        .values({
          id: record.id,
          tenant_id: record.tenantId,
          name: record.name,
          kind: record.kind,
          size_mib: record.sizeMiB,
          labels: JSON.stringify(record.labels),
          shared: record.shared ? 1 : 0,
          state: record.state,
          source_id: record.sourceId,
          copy_method: record.copyMethod,
          expires_at: record.expiresAt,
          created_at: record.createdAt,
          updated_at: record.updatedAt,
        })
        .execute();
      const labels = Object.entries(record.labels);
      if (labels.length > 0) {
        await trx
          .insertInto('volume_labels')
          .values(labels.map(([key, value]) => ({ tenant_id: record.tenantId, volume_id: record.id, key, value })))
          .execute();
      }
    });
  }

  /** The volume of `tenantId` named `ref` (its name or id), or null (also for another tenant's). */
  async get(tenantId: string, ref: string): Promise<VolumeRecord | null> {
    const row = await this.db
      .selectFrom('volumes')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where((eb) => eb.or([eb('id', '=', ref), eb('name', '=', ref)]))
      .executeTakeFirst();
    return row === undefined ? null : toRecord(row);
  }

  /** One page of a tenant's volumes in (createdAt, id) order. */
  async list(tenantId: string, options: ListVolumesOptions): Promise<VolumeRecord[]> {
    let q = this.db.selectFrom('volumes').selectAll().where('tenant_id', '=', tenantId);
    if (options.kind !== undefined) q = q.where('kind', '=', options.kind);
    if (options.sourceId !== undefined) q = q.where('source_id', '=', options.sourceId);
    for (const [key, value] of options.labels) {
      q = q.where(({ exists, selectFrom }) =>
        exists(
          selectFrom('volume_labels')
            .select('volume_labels.key')
            .whereRef('volume_labels.volume_id', '=', 'volumes.id')
            .where('volume_labels.tenant_id', '=', tenantId)
            .where('volume_labels.key', '=', key)
            .where('volume_labels.value', '=', value),
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

  /** Every volume row of every tenant (the reconciler's view). */
  async listAcrossTenants(): Promise<VolumeRecord[]> {
    return (await this.db.selectFrom('volumes').selectAll().execute()).map(toRecord);
  }

  /** Set the state of a volume. */
  async setState(tenantId: string, id: string, state: VolumeRecord['state'], at: string): Promise<void> {
    await this.db
      .updateTable('volumes')
      .set({ state, updated_at: at })
      .where('tenant_id', '=', tenantId)
      .where('id', '=', id)
      .execute();
  }

  /** Record a finished copy's method and make it `ready`. */
  async markReady(tenantId: string, id: string, copyMethod: VolumeRecord['copyMethod'], at: string): Promise<void> {
    await this.db
      .updateTable('volumes')
      .set({ state: 'ready', copy_method: copyMethod, updated_at: at })
      .where('tenant_id', '=', tenantId)
      .where('id', '=', id)
      .execute();
  }

  /**
   * Record a volume's new, larger size within the tenant's volume-bytes quota.
   * @throws QuotaExceededError (nothing written)
   */
  async grow(tenantId: string, id: string, fromMiB: number, toMiB: number, at: string): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await this.quotas.guard(trx, tenantId, { volumeBytes: (toMiB - fromMiB) * MIB });
      await trx
        .updateTable('volumes')
        .set({ size_mib: toMiB, updated_at: at })
        .where('tenant_id', '=', tenantId)
        .where('id', '=', id)
        .execute();
    });
  }

  /** Remove a volume's row, labels and mount rows. Idempotent. */
  async remove(tenantId: string, id: string): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await trx.deleteFrom('volume_mounts').where('tenant_id', '=', tenantId).where('volume_id', '=', id).execute();
      await trx.deleteFrom('volume_labels').where('tenant_id', '=', tenantId).where('volume_id', '=', id).execute();
      await trx.deleteFrom('volumes').where('tenant_id', '=', tenantId).where('id', '=', id).execute();
    });
  }

  /** Mount rows of a volume, in sandbox order. */
  async mountsOfVolume(volumeId: string, db: Kysely<DB> = this.db): Promise<VolumeMountRecord[]> {
    const rows = await db
      .selectFrom('volume_mounts')
      .selectAll()
      .where('volume_id', '=', volumeId)
      .orderBy('sandbox_id')
      .execute();
    return rows.map(toMount);
  }

  /** Mount rows of a sandbox, in the order of its create request. */
  async mountsOfSandbox(sandboxId: string): Promise<VolumeMountRecord[]> {
    const rows = await this.db
      .selectFrom('volume_mounts')
      .selectAll()
      .where('sandbox_id', '=', sandboxId)
      .orderBy('position')
      .execute();
    return rows.map(toMount);
  }

  /**
   * Inside `trx` (the sandbox insert's): lock each volume (PostgreSQL), refuse a read-write mount of a non-shared
   * volume another sandbox mounts read-write, and insert the mount rows.
   * @throws VolumeMountTakenError (the caller's transaction rolls back)
   */
  async insertMounts(trx: Kysely<DB>, mounts: ReadonlyArray<VolumeMountRecord & { shared: boolean }>): Promise<void> {
    for (const mount of mounts) {
      if (this.postgres) {
        await trx.selectFrom('volumes').select('id').where('id', '=', mount.volumeId).forUpdate().execute();
      }
      if (!mount.readOnly && !mount.shared) {
        const holder = await trx
          .selectFrom('volume_mounts')
          .select('sandbox_id')
          .where('volume_id', '=', mount.volumeId)
          .where('read_only', '=', 0)
          .where('sandbox_id', '!=', mount.sandboxId)
          .executeTakeFirst();
        if (holder !== undefined) throw new VolumeMountTakenError(mount.volumeId, holder.sandbox_id);
      }
      await trx
        .insertInto('volume_mounts')
        .values({
          sandbox_id: mount.sandboxId,
          volume_id: mount.volumeId,
          tenant_id: mount.tenantId,
          path: mount.path,
          read_only: mount.readOnly ? 1 : 0,
          position: mount.position,
        })
        .execute();
    }
  }

  /** Remove every mount row of a sandbox (it is gone, or a forced volume delete detached it). */
  async removeMountsOfSandbox(sandboxId: string, db: Kysely<DB> = this.db): Promise<void> {
    await db.deleteFrom('volume_mounts').where('sandbox_id', '=', sandboxId).execute();
  }

  /** Remove the mount rows of one volume in the given sandboxes (a forced delete detaching it). */
  async detach(volumeId: string, sandboxIds: readonly string[]): Promise<void> {
    if (sandboxIds.length === 0) return;
    await this.db
      .deleteFrom('volume_mounts')
      .where('volume_id', '=', volumeId)
      .where('sandbox_id', 'in', [...sandboxIds])
      .execute();
  }
}

function toMount(row: DB['volume_mounts']): VolumeMountRecord {
  return {
    sandboxId: row.sandbox_id,
    volumeId: row.volume_id,
    tenantId: row.tenant_id,
    path: row.path,
    readOnly: Number(row.read_only) === 1,
    position: Number(row.position),
  };
}
