import type { Kysely } from 'kysely';
import type { DB } from './database.js';

/** A secret's row as stored (the value sealed). */
export interface SecretRow {
  tenantId: string;
  name: string;
  hosts: string[];
  header: string | null;
  format: string | null;
  sealedValue: string;
  createdAt: string;
  rotatedAt: string | null;
}

/** One placeholder a sandbox holds. */
export interface SandboxSecretBinding {
  name: string;
  env: string;
  placeholder: string;
}

/** `secrets` and `sandbox_secrets`. */
export class SecretStore {
  constructor(private readonly db: Kysely<DB>) {}

  async list(tenantId: string): Promise<SecretRow[]> {
    const rows = await this.db
      .selectFrom('secrets')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .orderBy('name')
      .execute();
    return rows.map(toRow);
  }

  async get(tenantId: string, name: string): Promise<SecretRow | null> {
    const row = await this.db
      .selectFrom('secrets')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('name', '=', name)
      .executeTakeFirst();
    return row === undefined ? null : toRow(row);
  }

  /** Insert, or replace everything but `createdAt` (then `rotatedAt` is `at`). */
  async upsert(row: Omit<SecretRow, 'createdAt' | 'rotatedAt'>, at: string): Promise<SecretRow> {
    const fields = {
      hosts: JSON.stringify(row.hosts),
      header: row.header,
      format: row.format,
      sealed_value: row.sealedValue,
    };
    await this.db
      .insertInto('secrets')
      .values({ tenant_id: row.tenantId, name: row.name, ...fields, created_at: at, rotated_at: null })
      .onConflict((oc) => oc.columns(['tenant_id', 'name']).doUpdateSet({ ...fields, rotated_at: at }))
      .execute();
    return (await this.get(row.tenantId, row.name)) as SecretRow;
  }

  /** @returns false when no such secret exists */
  async rotate(tenantId: string, name: string, sealedValue: string, at: string): Promise<boolean> {
    const result = await this.db
      .updateTable('secrets')
      .set({ sealed_value: sealedValue, rotated_at: at })
      .where('tenant_id', '=', tenantId)
      .where('name', '=', name)
      .executeTakeFirst();
    return Number(result.numUpdatedRows) > 0;
  }

  /** @returns false when no such secret exists */
  async remove(tenantId: string, name: string): Promise<boolean> {
    const result = await this.db
      .deleteFrom('secrets')
      .where('tenant_id', '=', tenantId)
      .where('name', '=', name)
      .executeTakeFirst();
    return Number(result.numDeletedRows) > 0;
  }

  /** Record the placeholders of a sandbox (its row exists). */
  async bind(tenantId: string, sandboxId: string, bindings: readonly SandboxSecretBinding[]): Promise<void> {
    if (bindings.length === 0) return;
    await this.db
      .insertInto('sandbox_secrets')
      .values(bindings.map((b) => ({ sandbox_id: sandboxId, tenant_id: tenantId, ...b })))
      .onConflict((oc) => oc.columns(['sandbox_id', 'name']).doNothing())
      .execute();
  }

  /** The placeholders a sandbox holds, with its tenant (null tenant: none). */
  async bindings(sandboxId: string): Promise<{ tenantId: string | null; bindings: SandboxSecretBinding[] }> {
    const rows = await this.db
      .selectFrom('sandbox_secrets')
      .select(['tenant_id', 'name', 'env', 'placeholder'])
      .where('sandbox_id', '=', sandboxId)
      .execute();
    return {
      tenantId: rows[0]?.tenant_id ?? null,
      bindings: rows.map((r) => ({ name: r.name, env: r.env, placeholder: r.placeholder })),
    };
  }
}

function toRow(r: {
  tenant_id: string;
  name: string;
  hosts: string;
  header: string | null;
  format: string | null;
  sealed_value: string;
  created_at: string;
  rotated_at: string | null;
}): SecretRow {
  return {
    tenantId: r.tenant_id,
    name: r.name,
    hosts: JSON.parse(r.hosts) as string[],
    header: r.header,
    format: r.format,
    sealedValue: r.sealed_value,
    createdAt: r.created_at,
    rotatedAt: r.rotated_at,
  };
}
