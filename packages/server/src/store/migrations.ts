import { type Kysely, type Migration, type MigrationProvider, Migrator, PostgresAdapter } from 'kysely';
import type { DB } from './database.js';

/** Every migration, in order. Static so that it survives bundling; additive only. */
const MIGRATIONS: Record<string, Migration> = {
  '0001_initial': {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('api_keys')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('tenant_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('role', 'text', (c) => c.notNull())
        .addColumn('prefix', 'text', (c) => c.notNull())
        .addColumn('secret_hash', 'text', (c) => c.notNull().unique())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('revoked_at', 'text')
        .execute();
      await db.schema.createIndex('api_keys_tenant').on('api_keys').columns(['tenant_id', 'created_at']).execute();
      await db.schema
        .createTable('sandboxes')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('tenant_id', 'text', (c) => c.notNull())
        .addColumn('template', 'text', (c) => c.notNull())
        .addColumn('template_id', 'text', (c) => c.notNull())
        .addColumn('state', 'text', (c) => c.notNull())
        .addColumn('conditions', 'text', (c) => c.notNull())
        .addColumn('env', 'text', (c) => c.notNull())
        .addColumn('labels', 'text', (c) => c.notNull())
        .addColumn('cwd', 'text', (c) => c.notNull())
        .addColumn('hostname', 'text', (c) => c.notNull())
        .addColumn('cpu_count', 'double precision', (c) => c.notNull())
        .addColumn('memory_mib', 'integer', (c) => c.notNull())
        .addColumn('disk_mib', 'integer', (c) => c.notNull())
        .addColumn('timeout_ms', 'double precision')
        .addColumn('expires_at', 'text')
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('updated_at', 'text', (c) => c.notNull())
        .addColumn('version', 'integer', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex('sandboxes_tenant_page')
        .on('sandboxes')
        .columns(['tenant_id', 'created_at', 'id'])
        .execute();
      await db.schema
        .createTable('sandbox_labels')
        .addColumn('tenant_id', 'text', (c) => c.notNull())
        .addColumn('sandbox_id', 'text', (c) => c.notNull().references('sandboxes.id').onDelete('cascade'))
        .addColumn('key', 'text', (c) => c.notNull())
        .addColumn('value', 'text', (c) => c.notNull())
        .addPrimaryKeyConstraint('sandbox_labels_pk', ['sandbox_id', 'key'])
        .execute();
      await db.schema
        .createIndex('sandbox_labels_lookup')
        .on('sandbox_labels')
        .columns(['tenant_id', 'key', 'value'])
        .execute();
      await db.schema
        .createTable('templates')
        .addColumn('tenant_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('id', 'text', (c) => c.notNull())
        .addColumn('state', 'text', (c) => c.notNull())
        .addColumn('from_name', 'text')
        .addColumn('apt', 'text', (c) => c.notNull())
        .addColumn('run', 'text', (c) => c.notNull())
        .addColumn('size_bytes', 'double precision', (c) => c.notNull())
        .addColumn('error', 'text')
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addPrimaryKeyConstraint('templates_pk', ['tenant_id', 'name'])
        .execute();
    },
    async down(db: Kysely<unknown>) {
      for (const t of ['sandbox_labels', 'sandboxes', 'api_keys', 'templates']) {
        await db.schema.dropTable(t).ifExists().execute();
      }
    },
  },
  '0100_persistence': {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('sandboxes').addColumn('desired_state', 'text').execute();
      await db.schema.alterTable('sandboxes').addColumn('auto_resume', 'integer').execute();
      await db.schema.alterTable('sandboxes').addColumn('parent_id', 'text').execute();
      await db.schema.alterTable('sandboxes').addColumn('snapshot_id', 'text').execute();
      await db.schema
        .createTable('snapshots')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('tenant_id', 'text', (c) => c.notNull())
        .addColumn('name', 'text')
        .addColumn('sandbox_id', 'text', (c) => c.notNull())
        .addColumn('template', 'text', (c) => c.notNull())
        .addColumn('template_id', 'text', (c) => c.notNull())
        .addColumn('memory', 'integer', (c) => c.notNull())
        .addColumn('state', 'text', (c) => c.notNull())
        .addColumn('image_size_bytes', 'double precision', (c) => c.notNull())
        .addColumn('disk_size_bytes', 'double precision', (c) => c.notNull())
        .addColumn('runtime_version', 'text', (c) => c.notNull())
        .addColumn('settings', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex('snapshots_tenant_name')
        .on('snapshots')
        .columns(['tenant_id', 'name'])
        .unique()
        .execute();
      await db.schema.createIndex('snapshots_sandbox').on('snapshots').columns(['sandbox_id']).execute();
    },
    async down(db: Kysely<unknown>) {
      await db.schema.dropTable('snapshots').ifExists().execute();
    },
  },
  '0300_lifecycle': {
    async up(db: Kysely<unknown>) {
      const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
      for (const [column, type] of [
        ['timeout_action', 'text'],
        ['idle_timeout_ms', 'double precision'],
        ['max_age_ms', 'double precision'],
        ['paused_retention_ms', 'double precision'],
        ['snapshot_keep_last', 'integer'],
        ['paused_at', 'text'],
        ['expiry_warned_for', 'text'],
        ['expiry_warned_at', 'text'],
      ] as const) {
        await db.schema.alterTable('sandboxes').addColumn(column, type).execute();
      }
      await db.schema.alterTable('snapshots').addColumn('expires_at', 'text').execute();
      await db.schema
        .createTable('events')
        .addColumn('seq', postgres ? 'bigserial' : 'integer', (c) =>
          postgres ? c.primaryKey() : c.primaryKey().autoIncrement(),
        )
        .addColumn('tenant_id', 'text', (c) => c.notNull())
        .addColumn('type', 'text', (c) => c.notNull())
        .addColumn('sandbox_id', 'text')
        .addColumn('snapshot_id', 'text')
        .addColumn('reason', 'text', (c) => c.notNull())
        .addColumn('actor', 'text', (c) => c.notNull())
        .addColumn('message', 'text', (c) => c.notNull())
        .addColumn('data', 'text', (c) => c.notNull())
        .addColumn('at', 'text', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('events_tenant_seq').on('events').columns(['tenant_id', 'seq']).execute();
      await db.schema.createIndex('events_sandbox_seq').on('events').columns(['sandbox_id', 'seq']).execute();
      await db.schema
        .createTable('webhooks')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('tenant_id', 'text', (c) => c.notNull())
        .addColumn('url', 'text', (c) => c.notNull())
        .addColumn('secret', 'text', (c) => c.notNull())
        .addColumn('types', 'text')
        .addColumn('created_at', 'text', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('webhooks_tenant').on('webhooks').columns(['tenant_id']).execute();
      await db.schema
        .createTable('webhook_deliveries')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('webhook_id', 'text', (c) => c.notNull())
        .addColumn('event_seq', 'bigint', (c) => c.notNull())
        .addColumn('state', 'text', (c) => c.notNull())
        .addColumn('attempts', 'integer', (c) => c.notNull())
        .addColumn('next_attempt_at', 'text', (c) => c.notNull())
        .addColumn('last_status', 'integer')
        .addColumn('last_error', 'text')
        .addColumn('updated_at', 'text', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex('webhook_deliveries_due')
        .on('webhook_deliveries')
        .columns(['state', 'next_attempt_at'])
        .execute();
      await db.schema
        .createTable('tenant_quotas')
        .addColumn('tenant_id', 'text', (c) => c.primaryKey())
        .addColumn('max_running', 'integer')
        .addColumn('max_sandboxes', 'integer')
        .addColumn('max_disk_bytes', 'double precision')
        .addColumn('max_snapshots', 'integer')
        .addColumn('updated_at', 'text', (c) => c.notNull())
        .execute();
    },
    async down(db: Kysely<unknown>) {
      for (const t of ['tenant_quotas', 'webhook_deliveries', 'webhooks', 'events']) {
        await db.schema.dropTable(t).ifExists().execute();
      }
    },
  },
};

/** Hygiene: quarantine. */
MIGRATIONS['0400_quarantine'] = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable('sandboxes').addColumn('quarantine', 'text').execute();
  },
  async down(db: Kysely<unknown>) {
    await db.schema.alterTable('sandboxes').dropColumn('quarantine').execute();
  },
};

/** Issue 6: snapshot retention warns before it deletes (the planned deletion time, set with the warning). */
MIGRATIONS['0800_snapshot_retention_warning'] = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable('snapshots').addColumn('retention_delete_at', 'text').execute();
  },
  async down(db: Kysely<unknown>) {
    await db.schema.alterTable('snapshots').dropColumn('retention_delete_at').execute();
  },
};

/** Issue 24: per-tenant lifecycle policy defaults, set by an admin (JSON of the fields set). */
MIGRATIONS['2400_tenant_policy_defaults'] = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('tenant_policy_defaults')
      .addColumn('tenant_id', 'text', (c) => c.primaryKey())
      .addColumn('defaults', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema.alterTable('sandboxes').addColumn('policy_sources', 'text').execute();
  },
  async down(db: Kysely<unknown>) {
    await db.schema.alterTable('sandboxes').dropColumn('policy_sources').execute();
    await db.schema.dropTable('tenant_policy_defaults').ifExists().execute();
  },
};

/**
 * Issue 24: scoped keys. Every added column is null on existing rows, which reads as full rights of the key's role,
 * no restriction and no expiry: keys issued before keep working as they did.
 */
MIGRATIONS['2410_scoped_keys'] = {
  async up(db: Kysely<unknown>) {
    for (const column of ['scopes', 'restriction', 'restrict_sandbox_id', 'expires_at', 'last_used_at']) {
      await db.schema.alterTable('api_keys').addColumn(column, 'text').execute();
    }
    await db.schema.createIndex('api_keys_sandbox').on('api_keys').columns(['restrict_sandbox_id']).execute();
  },
  async down(db: Kysely<unknown>) {
    await db.schema.dropIndex('api_keys_sandbox').ifExists().execute();
    for (const column of ['last_used_at', 'expires_at', 'restrict_sandbox_id', 'restriction', 'scopes']) {
      await db.schema.alterTable('api_keys').dropColumn(column).execute();
    }
  },
};

/** Issue 24: the audit log (a hash chain, `services/audit-service.ts`) and its head and retention anchor. */
MIGRATIONS['2420_audit_log'] = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('audit_log')
      .addColumn('seq', 'bigint', (c) => c.primaryKey())
      .addColumn('at', 'text', (c) => c.notNull())
      .addColumn('tenant_id', 'text')
      .addColumn('key_id', 'text')
      .addColumn('key_name', 'text')
      .addColumn('source_address', 'text', (c) => c.notNull())
      .addColumn('request_id', 'text', (c) => c.notNull())
      .addColumn('action', 'text', (c) => c.notNull())
      .addColumn('target', 'text')
      .addColumn('result', 'text', (c) => c.notNull())
      .addColumn('status', 'integer', (c) => c.notNull())
      .addColumn('error_code', 'text')
      .addColumn('details', 'text')
      .addColumn('prev_hash', 'text', (c) => c.notNull())
      .addColumn('hash', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('audit_log_tenant_seq').on('audit_log').columns(['tenant_id', 'seq']).execute();
    await db.schema.createIndex('audit_log_at').on('audit_log').columns(['at']).execute();
    await db.schema
      .createTable('audit_state')
      .addColumn('id', 'integer', (c) => c.primaryKey())
      .addColumn('head_seq', 'bigint', (c) => c.notNull())
      .addColumn('pruned_through_seq', 'bigint', (c) => c.notNull())
      .addColumn('pruned_hash', 'text', (c) => c.notNull())
      .execute();
  },
  async down(db: Kysely<unknown>) {
    await db.schema.dropTable('audit_state').ifExists().execute();
    await db.schema.dropTable('audit_log').ifExists().execute();
  },
};

/** Issue 23: ports exposed as public (their preview URL needs no token). */
MIGRATIONS['2300_public_ports'] = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('sandbox_public_ports')
      .addColumn('sandbox_id', 'text', (c) => c.notNull())
      .addColumn('port', 'integer', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('sandbox_public_ports_pk', ['sandbox_id', 'port'])
      .execute();
  },
  async down(db: Kysely<unknown>) {
    await db.schema.dropTable('sandbox_public_ports').ifExists().execute();
  },
};

/** Issue 23: secrets substituted at egress, and the placeholders each sandbox holds. */
MIGRATIONS['2300_secrets'] = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('secrets')
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('hosts', 'text', (c) => c.notNull())
      .addColumn('header', 'text')
      .addColumn('format', 'text')
      .addColumn('sealed_value', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('rotated_at', 'text')
      .addPrimaryKeyConstraint('secrets_pk', ['tenant_id', 'name'])
      .execute();
    await db.schema
      .createTable('sandbox_secrets')
      .addColumn('sandbox_id', 'text', (c) => c.notNull().references('sandboxes.id').onDelete('cascade'))
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('env', 'text', (c) => c.notNull())
      .addColumn('placeholder', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('sandbox_secrets_pk', ['sandbox_id', 'name'])
      .execute();
  },
  async down(db: Kysely<unknown>) {
    await db.schema.dropTable('sandbox_secrets').ifExists().execute();
    await db.schema.dropTable('secrets').ifExists().execute();
  },
};

class StaticMigrationProvider implements MigrationProvider {
  async getMigrations(): Promise<Record<string, Migration>> {
    return MIGRATIONS;
  }
}

/**
 * Bring the schema to the latest migration. Safe to call on every start and from several processes.
 * @throws Error when a migration fails (the message names it)
 */
export async function migrateToLatest(db: Kysely<DB>): Promise<void> {
  // Issues add migrations in parallel under separate number ranges (0100 persistence, 0200 exec): allow a range to
  // land after a higher one has run.
  const migrator = new Migrator({ db, provider: new StaticMigrationProvider(), allowUnorderedMigrations: true });
  const { error, results } = await migrator.migrateToLatest();
  if (error !== undefined) {
    const failed = results?.find((r) => r.status === 'Error')?.migrationName ?? 'unknown';
    throw new Error(`database migration ${failed} failed`, { cause: error });
  }
}

/**
 * Bring the schema to migration `name` and no further (upgrade tests start from an older schema).
 * @throws Error when a migration fails
 */
export async function migrateTo(db: Kysely<DB>, name: string): Promise<void> {
  const migrator = new Migrator({ db, provider: new StaticMigrationProvider(), allowUnorderedMigrations: true });
  const { error } = await migrator.migrateTo(name);
  if (error !== undefined) throw new Error(`database migration to ${name} failed`, { cause: error });
}

/** Network: each sandbox's network policy (JSON; null on rows from before it: no network). */
MIGRATIONS['0500_network'] = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable('sandboxes').addColumn('network', 'text').execute();
  },
  async down(db: Kysely<unknown>) {
    await db.schema.alterTable('sandboxes').dropColumn('network').execute();
  },
};

/** Issue 22: a tenant's named bucket credentials (the secret sealed like env values). */
MIGRATIONS['2200_buckets'] = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('buckets')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('bucket', 'text', (c) => c.notNull())
      .addColumn('endpoint', 'text', (c) => c.notNull())
      .addColumn('region', 'text', (c) => c.notNull())
      .addColumn('access_key_id', 'text', (c) => c.notNull())
      .addColumn('secret', 'text', (c) => c.notNull())
      .addColumn('path_style', 'integer', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addUniqueConstraint('buckets_tenant_name', ['tenant_id', 'name'])
      .execute();
  },
  async down(db: Kysely<unknown>) {
    await db.schema.dropTable('buckets').ifExists().execute();
  },
};

/** Issue 21: volumes, their labels and mounts; the tenant's volume quotas. */
MIGRATIONS['2100_volumes'] = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('volumes')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('kind', 'text', (c) => c.notNull())
      .addColumn('size_mib', 'integer', (c) => c.notNull())
      .addColumn('labels', 'text', (c) => c.notNull())
      .addColumn('shared', 'integer', (c) => c.notNull())
      .addColumn('state', 'text', (c) => c.notNull())
      .addColumn('source_id', 'text')
      .addColumn('copy_method', 'text')
      .addColumn('expires_at', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('volumes_tenant_name').on('volumes').columns(['tenant_id', 'name']).unique().execute();
    await db.schema
      .createIndex('volumes_tenant_page')
      .on('volumes')
      .columns(['tenant_id', 'created_at', 'id'])
      .execute();
    await db.schema
      .createTable('volume_labels')
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('volume_id', 'text', (c) => c.notNull())
      .addColumn('key', 'text', (c) => c.notNull())
      .addColumn('value', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('volume_labels_pk', ['volume_id', 'key'])
      .execute();
    await db.schema
      .createIndex('volume_labels_lookup')
      .on('volume_labels')
      .columns(['tenant_id', 'key', 'value'])
      .execute();
    await db.schema
      .createTable('volume_mounts')
      .addColumn('sandbox_id', 'text', (c) => c.notNull())
      .addColumn('volume_id', 'text', (c) => c.notNull())
      .addColumn('tenant_id', 'text', (c) => c.notNull())
      .addColumn('path', 'text', (c) => c.notNull())
      .addColumn('read_only', 'integer', (c) => c.notNull())
      .addColumn('position', 'integer', (c) => c.notNull())
      .addPrimaryKeyConstraint('volume_mounts_pk', ['sandbox_id', 'path'])
      .execute();
    await db.schema.createIndex('volume_mounts_volume').on('volume_mounts').columns(['volume_id']).execute();
    await db.schema.alterTable('tenant_quotas').addColumn('max_volumes', 'integer').execute();
    await db.schema.alterTable('tenant_quotas').addColumn('max_volume_bytes', 'double precision').execute();
  },
  async down(db: Kysely<unknown>) {
    await db.schema.alterTable('tenant_quotas').dropColumn('max_volume_bytes').execute();
    await db.schema.alterTable('tenant_quotas').dropColumn('max_volumes').execute();
    for (const t of ['volume_mounts', 'volume_labels', 'volumes']) await db.schema.dropTable(t).ifExists().execute();
  },
};
