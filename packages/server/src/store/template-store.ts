import type { Kysely, Selectable } from 'kysely';
import type { DB, TemplatesTable } from './database.js';

/** Tenant that owns templates every tenant can use (the `base` template). */
export const PUBLIC_TENANT = 'public';

/** A template row. */
export interface TemplateRecord {
  tenantId: string;
  name: string;
  id: string;
  state: 'building' | 'ready' | 'error';
  fromName: string | null;
  apt: string[];
  run: string[];
  sizeBytes: number;
  error: string | null;
  createdAt: string;
}

function toRecord(row: Selectable<TemplatesTable>): TemplateRecord {
  return {
    tenantId: row.tenant_id,
    name: row.name,
    id: row.id,
    state: row.state === 'ready' ? 'ready' : row.state === 'error' ? 'error' : 'building',
    fromName: row.from_name,
    apt: JSON.parse(row.apt) as string[],
    run: JSON.parse(row.run) as string[],
    sizeBytes: Number(row.size_bytes),
    error: row.error,
    createdAt: row.created_at,
  };
}

/** Template rows. A tenant sees its own templates plus the public ones. */
export class TemplateStore {
  constructor(private readonly db: Kysely<DB>) {}

  /** Insert or replace the row (`tenantId`, `name`). */
  async upsert(record: TemplateRecord): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await trx
        .deleteFrom('templates')
        .where('tenant_id', '=', record.tenantId)
        .where('name', '=', record.name)
        .execute();
      await trx.insertInto('templates').values(toRow(record)).execute();
    });
  }

  /**
   * Insert a new row.
   * @returns false when (`tenantId`, `name`) already exists
   */
  async insertNew(record: TemplateRecord): Promise<boolean> {
    try {
      await this.db.insertInto('templates').values(toRow(record)).execute();
      return true;
    } catch (error) {
      if (isUniqueViolation(error)) return false;
      throw error;
    }
  }

  /** Template `name` visible to `tenantId`: its own first, then the public one. */
  async get(tenantId: string, name: string): Promise<TemplateRecord | null> {
    const rows = await this.db
      .selectFrom('templates')
      .selectAll()
      .where('name', '=', name)
      .where('tenant_id', 'in', [tenantId, PUBLIC_TENANT])
      .execute();
    const own = rows.find((r) => r.tenant_id === tenantId) ?? rows[0];
    return own === undefined ? null : toRecord(own);
  }

  /** Templates visible to `tenantId`, by name. */
  async list(tenantId: string): Promise<TemplateRecord[]> {
    const rows = await this.db
      .selectFrom('templates')
      .selectAll()
      .where('tenant_id', 'in', [tenantId, PUBLIC_TENANT])
      .orderBy('name')
      .orderBy('tenant_id')
      .execute();
    return rows.map(toRecord);
  }

  /** Set the outcome of a build. */
  async finish(
    tenantId: string,
    name: string,
    outcome: { state: 'ready' | 'error'; id: string; sizeBytes: number; error: string | null },
  ): Promise<void> {
    await this.db
      .updateTable('templates')
      .set({ state: outcome.state, id: outcome.id, size_bytes: outcome.sizeBytes, error: outcome.error })
      .where('tenant_id', '=', tenantId)
      .where('name', '=', name)
      .execute();
  }

  async remove(tenantId: string, name: string): Promise<void> {
    await this.db.deleteFrom('templates').where('tenant_id', '=', tenantId).where('name', '=', name).execute();
  }

  /** Whether a template of `tenantId` is built from `name`. */
  async hasChildren(tenantId: string, name: string): Promise<boolean> {
    const row = await this.db
      .selectFrom('templates')
      .select('name')
      .where('tenant_id', 'in', [tenantId, PUBLIC_TENANT])
      .where('from_name', '=', name)
      .limit(1)
      .executeTakeFirst();
    return row !== undefined;
  }

  /** Rows left `building` by a process that stopped mid-build. */
  async failInterruptedBuilds(message: string): Promise<void> {
    await this.db
      .updateTable('templates')
      .set({ state: 'error', error: message })
      .where('state', '=', 'building')
      .execute();
  }
}

function isUniqueViolation(error: unknown): boolean {
  const e = error as { code?: string } | undefined;
  return e?.code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || e?.code === 'SQLITE_CONSTRAINT_UNIQUE' || e?.code === '23505';
}

/** The `templates` row of a record (lists as JSON text, portable across SQLite and PostgreSQL). */
function toRow(record: TemplateRecord) {
  return {
    tenant_id: record.tenantId,
    name: record.name,
    id: record.id,
    state: record.state,
    from_name: record.fromName,
    apt: JSON.stringify(record.apt),
    run: JSON.stringify(record.run),
    size_bytes: record.sizeBytes,
    error: record.error,
    created_at: record.createdAt,
  };
}
