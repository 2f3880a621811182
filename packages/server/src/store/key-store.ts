import {
  type ApiKeyRole,
  type KeyRestriction,
  KeyRestrictionSchema,
  type KeyScope,
  KeyScopeSchema,
} from '@burrow/contract';
import type { Kysely, Selectable, Transaction } from 'kysely';
import { z } from 'zod';
import type { ApiKeysTable, DB } from './database.js';

/** An API key row (never the secret itself). */
export interface ApiKeyRecord {
  id: string;
  tenantId: string;
  name: string;
  role: ApiKeyRole;
  prefix: string;
  secretHash: string;
  createdAt: string;
  revokedAt: string | null;
  /** Scopes held; null: every scope the role allows. */
  scopes: KeyScope[] | null;
  /** Sandboxes reached; null: the whole tenant. */
  restriction: KeyRestriction | null;
  expiresAt: string | null;
  lastUsedAt: string | null;
}

const StoredScopesSchema = z.array(KeyScopeSchema);

function toRole(role: string): ApiKeyRole {
  return role === 'admin' || role === 'viewer' ? role : 'member';
}

function toRecord(row: Selectable<ApiKeysTable>): ApiKeyRecord {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    name: row.name,
    role: toRole(row.role),
    prefix: row.prefix,
    secretHash: row.secret_hash,
    createdAt: row.created_at,
    revokedAt: row.revoked_at,
    // A stored value that no longer parses (a scope removed from the contract) grants nothing rather than everything.
    scopes: row.scopes === null ? null : (StoredScopesSchema.safeParse(JSON.parse(row.scopes)).data ?? []),
    restriction: row.restriction === null ? null : KeyRestrictionSchema.parse(JSON.parse(row.restriction)),
    expiresAt: row.expires_at,
    lastUsedAt: row.last_used_at,
  };
}

/** API key rows. */
export class KeyStore {
  constructor(private readonly db: Kysely<DB>) {}

  async insert(record: ApiKeyRecord): Promise<void> {
    await this.db
      .insertInto('api_keys')
      .values({
        id: record.id,
        tenant_id: record.tenantId,
        name: record.name,
        role: record.role,
        prefix: record.prefix,
        secret_hash: record.secretHash,
        created_at: record.createdAt,
        revoked_at: record.revokedAt,
        scopes: record.scopes === null ? null : JSON.stringify(record.scopes),
        restriction: record.restriction === null ? null : JSON.stringify(record.restriction),
        restrict_sandbox_id: record.restriction?.type === 'sandbox' ? record.restriction.sandboxId : null,
        expires_at: record.expiresAt,
        last_used_at: record.lastUsedAt,
      })
      .execute();
  }

  /** The key whose secret hashes to `secretHash`, revoked or not (authentication happens before a tenant is known). */
  async findBySecretHash(secretHash: string): Promise<ApiKeyRecord | null> {
    const row = await this.db
      .selectFrom('api_keys')
      .selectAll()
      .where('secret_hash', '=', secretHash)
      .executeTakeFirst();
    return row === undefined ? null : toRecord(row);
  }

  /** Keys of `tenantId`, or of every tenant when `tenantId` is null (admin view), oldest first. */
  async list(tenantId: string | null): Promise<ApiKeyRecord[]> {
    let q = this.db.selectFrom('api_keys').selectAll();
    if (tenantId !== null) q = q.where('tenant_id', '=', tenantId);
    const rows = await q.orderBy('created_at').orderBy('id').execute();
    return rows.map(toRecord);
  }

  /** The key `id` in `tenantId` (or any tenant when null). */
  async get(tenantId: string | null, id: string): Promise<ApiKeyRecord | null> {
    let q = this.db.selectFrom('api_keys').selectAll().where('id', '=', id);
    if (tenantId !== null) q = q.where('tenant_id', '=', tenantId);
    const row = await q.executeTakeFirst();
    return row === undefined ? null : toRecord(row);
  }

  /** Mark the key revoked at `revokedAt` unless it already is. */
  async revoke(id: string, revokedAt: string): Promise<void> {
    await this.db
      .updateTable('api_keys')
      .set({ revoked_at: revokedAt })
      .where('id', '=', id)
      .where('revoked_at', 'is', null)
      .execute();
  }

  /** Record a successful authentication of key `id` at `usedAt`. */
  async touch(id: string, usedAt: string): Promise<void> {
    await this.db.updateTable('api_keys').set({ last_used_at: usedAt }).where('id', '=', id).execute();
  }

  /** Whether any admin key row exists (revoked ones included: revoking the first admin key must not mint a new one). */
  async hasAdminKey(): Promise<boolean> {
    const row = await this.db
      .selectFrom('api_keys')
      .select('id')
      .where('role', '=', 'admin')
      .limit(1)
      .executeTakeFirst();
    return row !== undefined;
  }
}

/**
 * Revoke, inside `trx`, every live key restricted to sandbox `sandboxId` (the sandbox's row is removed in the same
 * transaction: its keys die with it).
 */
export async function revokeKeysOfSandbox(trx: Transaction<DB>, sandboxId: string, revokedAt: string): Promise<void> {
  await trx
    .updateTable('api_keys')
    .set({ revoked_at: revokedAt })
    .where('restrict_sandbox_id', '=', sandboxId)
    .where('revoked_at', 'is', null)
    .execute();
}
