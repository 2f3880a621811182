import type { Kysely } from 'kysely';
import type { DB } from './database.js';
import { type EnvCodec, PLAIN_ENV } from './env-sealer.js';

/** A tenant's named bucket credentials, the secret in the clear (held in memory only while a call uses it). */
export interface BucketRecord {
  id: string;
  tenantId: string;
  name: string;
  bucket: string;
  endpoint: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  pathStyle: boolean;
  createdAt: string;
}

/**
 * The `buckets` table. The secret is sealed with the key of owner `bkt_…` exactly as env values are sealed (its
 * own AES-256-GCM key file, destroyed on removal), so the database never holds it in the clear.
 */
export class BucketStore {
  constructor(
    private readonly db: Kysely<DB>,
    private readonly codec: EnvCodec = PLAIN_ENV,
  ) {}

  /**
   * Insert a record.
   * @returns false when the tenant has a bucket of this name already (nothing written)
   */
  async insert(record: BucketRecord): Promise<boolean> {
    const existing = await this.get(record.tenantId, record.name);
    if (existing !== null) return false;
    const secret = this.codec.seal(record.id, { secretAccessKey: record.secretAccessKey });
    try {
      await this.db
        .insertInto('buckets')
        .values({
          id: record.id,
          tenant_id: record.tenantId,
          name: record.name,
          bucket: record.bucket,
          endpoint: record.endpoint,
          region: record.region,
          access_key_id: record.accessKeyId,
          secret,
          path_style: record.pathStyle ? 1 : 0,
          created_at: record.createdAt,
        })
        .execute();
    } catch (error) {
      this.codec.destroy(record.id);
      if ((await this.get(record.tenantId, record.name)) !== null) return false;
      throw error;
    }
    return true;
  }

  /** The record of `name` in `tenantId`, or null. */
  async get(tenantId: string, name: string): Promise<BucketRecord | null> {
    const row = await this.db
      .selectFrom('buckets')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .where('name', '=', name)
      .executeTakeFirst();
    return row === undefined ? null : this.decode(row);
  }

  /** Every record of `tenantId`, by name. */
  async list(tenantId: string): Promise<BucketRecord[]> {
    const rows = await this.db
      .selectFrom('buckets')
      .selectAll()
      .where('tenant_id', '=', tenantId)
      .orderBy('name')
      .execute();
    return rows.map((r) => this.decode(r));
  }

  /** Every record's id (for the sweep of key files whose row is gone). */
  async ids(): Promise<string[]> {
    return (await this.db.selectFrom('buckets').select('id').execute()).map((r) => r.id);
  }

  /**
   * Remove `name` of `tenantId` and destroy its key.
   * @returns whether it existed
   */
  async remove(tenantId: string, name: string): Promise<boolean> {
    const row = await this.get(tenantId, name);
    if (row === null) return false;
    await this.db.deleteFrom('buckets').where('id', '=', row.id).execute();
    this.codec.destroy(row.id);
    return true;
  }

  private decode(row: DB['buckets']): BucketRecord {
    return {
      id: row.id,
      tenantId: row.tenant_id,
      name: row.name,
      bucket: row.bucket,
      endpoint: row.endpoint,
      region: row.region,
      accessKeyId: row.access_key_id,
      secretAccessKey: this.codec.open(row.id, row.secret).secretAccessKey ?? '',
      pathStyle: row.path_style === 1,
      createdAt: row.created_at,
    };
  }
}
