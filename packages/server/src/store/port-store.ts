import type { Kysely } from 'kysely';
import type { DB } from './database.js';

/** Public ports (`sandbox_public_ports`) and the owner lookup of a preview URL, which names no tenant. */
export class PortStore {
  constructor(private readonly db: Kysely<DB>) {}

  /** The tenant of sandbox `id` whatever its state, or null when no row has that id. */
  async tenantOf(id: string): Promise<string | null> {
    const row = await this.db.selectFrom('sandboxes').select('tenant_id').where('id', '=', id).executeTakeFirst();
    return row?.tenant_id ?? null;
  }

  /** Whether `port` of sandbox `sandboxId` is public. */
  async isPublic(sandboxId: string, port: number): Promise<boolean> {
    const row = await this.db
      .selectFrom('sandbox_public_ports')
      .select('port')
      .where('sandbox_id', '=', sandboxId)
      .where('port', '=', port)
      .executeTakeFirst();
    return row !== undefined;
  }

  /** The public ports of sandbox `sandboxId`, ascending. */
  async publicPorts(sandboxId: string): Promise<number[]> {
    const rows = await this.db
      .selectFrom('sandbox_public_ports')
      .select('port')
      .where('sandbox_id', '=', sandboxId)
      .orderBy('port')
      .execute();
    return rows.map((r) => Number(r.port));
  }

  /** Make `port` public (`true`, idempotent) or private again (`false`). */
  async setPublic(sandboxId: string, port: number, isPublic: boolean, at: string): Promise<void> {
    if (!isPublic) {
      await this.db
        .deleteFrom('sandbox_public_ports')
        .where('sandbox_id', '=', sandboxId)
        .where('port', '=', port)
        .execute();
      return;
    }
    await this.db
      .insertInto('sandbox_public_ports')
      .values({ sandbox_id: sandboxId, port, created_at: at })
      .onConflict((oc) => oc.columns(['sandbox_id', 'port']).doNothing())
      .execute();
  }
}
