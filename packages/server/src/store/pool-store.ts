import type { Kysely } from 'kysely';
import type { DB } from './database.js';
import { QuotaStore } from './quota-store.js';
import type { SandboxRecord, SandboxStore } from './sandbox-store.js';

/**
 * Tenant of warm-pool sandboxes until one is claimed. Tenant names match `^[a-z0-9]…` (contract `NameSchema`), so
 * no caller's tenant can be `_pool`: pool rows appear in no tenant's list, lookup or count.
 */
export const POOL_TENANT = '_pool';

/** What a pool sandbox must match for a create to take it: content address of its template and its resources. */
export interface PoolSpec {
  /** Template content address (`templates.id`), not its name. */
  templateId: string;
  cpuCount: number;
  memoryMiB: number;
  diskMiB: number;
}

/** Per-sandbox data a claim writes onto the pool row (everything the create request sets besides the spec). */
export interface PoolClaim {
  tenantId: string;
  /** The template name the caller asked for. */
  template: string;
  env: Record<string, string>;
  labels: Record<string, string>;
  cwd: string;
  timeoutMs: number | null;
  expiresAt: string | null;
  autoResume: boolean;
  /** ISO time of the claim: the sandbox's `createdAt` and `updatedAt`. */
  at: string;
}

/** Candidates tried per claim before giving up (each lost race moves on to the next one). */
const CLAIM_CANDIDATES = 8;

/**
 * Warm-pool rows in the `sandboxes` table. A claim is one conditional UPDATE (`WHERE id = ? AND tenant_id = '_pool'
 * AND state = 'running' AND version = ?`): on SQLite writes are serialized, on PostgreSQL a second UPDATE of the same
 * row waits for the first to commit and then re-checks its WHERE on the new row, so exactly one caller gets a row.
 */
export class PoolStore {
  constructor(
    private readonly db: Kysely<DB>,
    private readonly sandboxes: SandboxStore,
  ) {}

  /** Every pool row, any state, oldest first. */
  async members(): Promise<SandboxRecord[]> {
    const ids = await this.db
      .selectFrom('sandboxes')
      .select('id')
      .where('tenant_id', '=', POOL_TENANT)
      .orderBy('created_at')
      .orderBy('id')
      .execute();
    const rows = await Promise.all(ids.map((r) => this.sandboxes.get(POOL_TENANT, r.id)));
    return rows.filter((r): r is SandboxRecord => r !== null);
  }

  /**
   * Hand one ready pool sandbox matching `spec` to `claim.tenantId`, writing the per-sandbox data onto it.
   * @returns the claimed row (now the tenant's), or null when no ready pool sandbox matches
   */
  async claim(spec: PoolSpec, claim: PoolClaim): Promise<SandboxRecord | null> {
    const candidates = await this.db
      .selectFrom('sandboxes')
      .select(['id', 'version'])
      .where('tenant_id', '=', POOL_TENANT)
      .where('state', '=', 'running')
      .where('template_id', '=', spec.templateId)
      .where('cpu_count', '=', spec.cpuCount)
      .where('memory_mib', '=', spec.memoryMiB)
      .where('disk_mib', '=', spec.diskMiB)
      .orderBy('created_at')
      .orderBy('id')
      .limit(CLAIM_CANDIDATES)
      .execute();
    for (const candidate of candidates) {
      const version = Number(candidate.version);
      const won = await this.db.transaction().execute(async (trx) => {
        // A claimed sandbox counts against the tenant's quotas like a created one (throws QuotaExceededError).
        await this.sandboxes.quotas.guard(trx, claim.tenantId, {
          sandboxes: 1,
          running: 1,
          diskBytes: QuotaStore.diskBytes(spec.diskMiB),
        });
        const result = await trx
          .updateTable('sandboxes')
          .set({
            tenant_id: claim.tenantId,
            template: claim.template,
            env: this.sandboxes.envCodec.seal(candidate.id, claim.env),
            labels: JSON.stringify(claim.labels),
            cwd: claim.cwd,
            timeout_ms: claim.timeoutMs,
            expires_at: claim.expiresAt,
            auto_resume: claim.autoResume ? 1 : 0,
            created_at: claim.at,
            updated_at: claim.at,
            version: version + 1,
          })
          .where('id', '=', candidate.id)
          .where('tenant_id', '=', POOL_TENANT)
          .where('state', '=', 'running')
          .where('version', '=', version)
          .executeTakeFirst();
        if (Number(result.numUpdatedRows) !== 1) return false;
        const labels = Object.entries(claim.labels);
        if (labels.length > 0) {
          await trx
            .insertInto('sandbox_labels')
            .values(labels.map(([key, value]) => ({ tenant_id: claim.tenantId, sandbox_id: candidate.id, key, value })))
            .execute();
        }
        return true;
      });
      if (won) return this.sandboxes.get(claim.tenantId, candidate.id);
    }
    return null;
  }
}
