import type { Kysely } from 'kysely';
import type { TenantPolicySettings } from '../lifecycle/policy-defaults.js';
import type { DB } from './database.js';

/** Per-tenant lifecycle policy defaults (`tenant_policy_defaults`), one JSON document per tenant. */
export class TenantDefaultsStore {
  constructor(private readonly db: Kysely<DB>) {}

  /** The defaults an admin set for `tenantId` ({} when none: everything inherits the server defaults). */
  async get(tenantId: string): Promise<TenantPolicySettings> {
    const row = await this.db
      .selectFrom('tenant_policy_defaults')
      .select('defaults')
      .where('tenant_id', '=', tenantId)
      .executeTakeFirst();
    return row === undefined ? {} : (JSON.parse(row.defaults) as TenantPolicySettings);
  }

  /** Replace the defaults of `tenantId` (an empty object removes them). */
  async set(tenantId: string, defaults: TenantPolicySettings, at: string): Promise<void> {
    if (Object.keys(defaults).length === 0) {
      await this.db.deleteFrom('tenant_policy_defaults').where('tenant_id', '=', tenantId).execute();
      return;
    }
    const json = JSON.stringify(defaults);
    await this.db
      .insertInto('tenant_policy_defaults')
      .values({ tenant_id: tenantId, defaults: json, updated_at: at })
      .onConflict((oc) => oc.column('tenant_id').doUpdateSet({ defaults: json, updated_at: at }))
      .execute();
  }
}
