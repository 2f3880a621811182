import type { QuotaLimits } from '@burrow/contract';
import { type Kysely, PostgresAdapter, type Transaction } from 'kysely';
import type { DB } from './database.js';

/** One MiB in bytes. */
const MIB = 1024 * 1024;

/** Sandbox states that count as running for the `maxRunning` quota (they hold CPU and memory, or are about to). */
export const RUNNING_QUOTA_STATES = ['creating', 'running', 'pausing', 'resuming', 'stopping'] as const;

/** Limits of a tenant with no quota row: unlimited. */
export const UNLIMITED: QuotaLimits = {
  maxRunning: null,
  maxSandboxes: null,
  maxDiskBytes: null,
  maxSnapshots: null,
  maxVolumes: null,
  maxVolumeBytes: null,
};

/** What a tenant uses now. */
export interface QuotaUsage {
  running: number;
  sandboxes: number;
  diskBytes: number;
  snapshots: number;
  /** Volumes, volume snapshots and forks. */
  volumes: number;
  /** Sum of their `sizeMiB`, bytes. */
  volumeBytes: number;
}

/** What one operation adds to the usage. */
export type QuotaNeed = Partial<QuotaUsage>;

/** Which limit a denied operation would pass, and the numbers. */
export interface QuotaDenial {
  tenantId: string;
  limit: keyof QuotaLimits;
  max: number;
  used: number;
  requested: number;
}

/** An operation would exceed a tenant quota; nothing was written. */
export class QuotaExceededError extends Error {
  constructor(readonly denial: QuotaDenial) {
    super(
      `tenant ${denial.tenantId} is at its ${denial.limit} quota (${denial.used} used of ${denial.max}, this needs ${denial.requested} more)`,
    );
    this.name = 'QuotaExceededError';
  }
}

const CHECKS: Array<[keyof QuotaLimits, keyof QuotaUsage]> = [
  ['maxRunning', 'running'],
  ['maxSandboxes', 'sandboxes'],
  ['maxDiskBytes', 'diskBytes'],
  ['maxSnapshots', 'snapshots'],
  ['maxVolumes', 'volumes'],
  ['maxVolumeBytes', 'volumeBytes'],
];

/**
 * The first limit `need` would pass, as a pure function of limits and usage.
 * @returns the denial, or null when it fits
 */
export function quotaDenial(
  tenantId: string,
  limits: QuotaLimits,
  usage: QuotaUsage,
  need: QuotaNeed,
): QuotaDenial | null {
  for (const [limit, key] of CHECKS) {
    const requested = need[key] ?? 0;
    const max = limits[limit];
    if (requested <= 0 || max === null) continue;
    if (usage[key] + requested > max) return { tenantId, limit, max, used: usage[key], requested };
  }
  return null;
}

/**
 * Per-tenant quotas. {@link guard} runs inside the transaction that inserts a sandbox or snapshot (or moves a
 * sandbox to `resuming`): it locks the tenant's quota row (PostgreSQL: `SELECT … FOR UPDATE` on a row created on
 * first use; SQLite: every write transaction is serialized on the one connection), counts usage and refuses, so
 * that concurrent creates can never pass a limit together.
 */
export class QuotaStore {
  private readonly postgres: boolean;
  /** Called after each refusal (the event recorder sets this). */
  onDenied: ((denial: QuotaDenial) => void) | null = null;

  constructor(private readonly db: Kysely<DB>) {
    this.postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  }

  /** The limits of `tenantId` (unlimited when none were set). */
  async limits(tenantId: string, trx: Kysely<DB> = this.db): Promise<QuotaLimits> {
    const row = await trx.selectFrom('tenant_quotas').selectAll().where('tenant_id', '=', tenantId).executeTakeFirst();
    if (row === undefined) return UNLIMITED;
    const n = (v: number | null) => (v === null ? null : Number(v));
    return {
      maxRunning: n(row.max_running),
      maxSandboxes: n(row.max_sandboxes),
      maxDiskBytes: n(row.max_disk_bytes),
      maxSnapshots: n(row.max_snapshots),
      maxVolumes: n(row.max_volumes ?? null),
      maxVolumeBytes: n(row.max_volume_bytes ?? null),
    };
  }

  /** Replace the limits of `tenantId`. */
  async setLimits(tenantId: string, limits: QuotaLimits, at: string): Promise<void> {
    const values = {
      max_running: limits.maxRunning,
      max_sandboxes: limits.maxSandboxes,
      max_disk_bytes: limits.maxDiskBytes,
      max_snapshots: limits.maxSnapshots,
      max_volumes: limits.maxVolumes,
      max_volume_bytes: limits.maxVolumeBytes,
      updated_at: at,
    };
    await this.db
      .insertInto('tenant_quotas')
      .values({ tenant_id: tenantId, ...values })
      .onConflict((oc) => oc.column('tenant_id').doUpdateSet(values))
      .execute();
  }

  /** What `tenantId` uses now. */
  async usage(tenantId: string, trx: Kysely<DB> = this.db): Promise<QuotaUsage> {
    const sandboxes = await trx
      .selectFrom('sandboxes')
      .select((eb) => [
        eb.fn.countAll<number>().as('n'),
        eb.fn.coalesce(eb.fn.sum<number>('disk_mib'), eb.lit(0)).as('disk'),
      ])
      .where('tenant_id', '=', tenantId)
      .where('state', '!=', 'deleted')
      .executeTakeFirstOrThrow();
    const running = await trx
      .selectFrom('sandboxes')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('tenant_id', '=', tenantId)
      .where('state', 'in', [...RUNNING_QUOTA_STATES])
      .executeTakeFirstOrThrow();
    const snapshots = await trx
      .selectFrom('snapshots')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('tenant_id', '=', tenantId)
      .executeTakeFirstOrThrow();
    const volumes = await trx
      .selectFrom('volumes')
      .select((eb) => [
        eb.fn.countAll<number>().as('n'),
        eb.fn.coalesce(eb.fn.sum<number>('size_mib'), eb.lit(0)).as('mib'),
      ])
      .where('tenant_id', '=', tenantId)
      .executeTakeFirstOrThrow();
    return {
      running: Number(running.n),
      sandboxes: Number(sandboxes.n),
      diskBytes: Number(sandboxes.disk) * MIB,
      snapshots: Number(snapshots.n),
      volumes: Number(volumes.n),
      volumeBytes: Number(volumes.mib) * MIB,
    };
  }

  /**
   * Inside `trx`: lock the tenant's quota row, count usage, and refuse when `need` does not fit.
   * @throws QuotaExceededError (the caller's transaction rolls back)
   */
  async guard(trx: Transaction<DB>, tenantId: string, need: QuotaNeed): Promise<void> {
    if (this.postgres) {
      await trx
        .insertInto('tenant_quotas')
        .values({
          tenant_id: tenantId,
          max_running: null,
          max_sandboxes: null,
          max_disk_bytes: null,
          max_snapshots: null,
          max_volumes: null,
          max_volume_bytes: null,
          updated_at: new Date(0).toISOString(),
        })
        .onConflict((oc) => oc.column('tenant_id').doNothing())
        .execute();
      await trx.selectFrom('tenant_quotas').select('tenant_id').where('tenant_id', '=', tenantId).forUpdate().execute();
    }
    const limits = await this.limits(tenantId, trx);
    if (Object.values(limits).every((v) => v === null)) return;
    const denial = quotaDenial(tenantId, limits, await this.usage(tenantId, trx), need);
    if (denial === null) return;
    this.onDenied?.(denial);
    throw new QuotaExceededError(denial);
  }

  /** Bytes a sandbox with `diskMiB` counts against `maxDiskBytes`. */
  static diskBytes(diskMiB: number): number {
    return diskMiB * MIB;
  }
}
