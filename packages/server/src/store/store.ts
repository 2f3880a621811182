import type { Kysely } from 'kysely';
import { AuditStore } from './audit-store.js';
import { BucketStore } from './bucket-store.js';
import { type DB, type Dialect, openDatabase } from './database.js';
import { EnvSealer } from './env-sealer.js';
import { KeyStore } from './key-store.js';
import { migrateToLatest } from './migrations.js';
import { PoolStore } from './pool-store.js';
import { SandboxStore } from './sandbox-store.js';
import { SnapshotStore } from './snapshot-store.js';
import { TemplateStore } from './template-store.js';
import { TenantDefaultsStore } from './tenant-defaults-store.js';
import { VolumeStore } from './volume-store.js';

/** Every table's accessors over one database connection. */
export interface Store {
  readonly db: Kysely<DB>;
  readonly dialect: Dialect;
  readonly sandboxes: SandboxStore;
  readonly keys: KeyStore;
  readonly templates: TemplateStore;
  readonly snapshots: SnapshotStore;
  /** Per-tenant lifecycle policy defaults. */
  readonly tenantDefaults: TenantDefaultsStore;
  /** Warm-pool rows (tenant `_pool`) and the atomic claim. */
  readonly pool: PoolStore;
  /** The hash-chained audit log. */
  readonly audit: AuditStore;
  /** A tenant's named bucket credentials (secrets sealed). */
  readonly buckets: BucketStore;
  /** Volumes and their mounts. */
  readonly volumes: VolumeStore;
  /**
   * Destroy env keys whose sandbox or snapshot row is gone (a crash between the row's removal and the key's).
   * @returns the owner ids whose keys were destroyed (none without an env key dir)
   */
  sweepEnvKeys(): Promise<string[]>;
  /** Apply pending migrations. */
  migrate(): Promise<void>;
  /** Close the connection (pool). */
  close(): Promise<void>;
}

/** Options of {@link openStore}. */
export interface OpenStoreOptions {
  /**
   * Where the per-sandbox and per-snapshot env keys live (`<dataDir>/env-keys`); env values are stored sealed with
   * them. Absent: env values are stored as plain JSON (tests of the store alone).
   */
  envKeysDir?: string | undefined;
}

/**
 * Open the store at `databaseUrl` (SQLite path, or `postgres://…`). Call `migrate()` before use.
 * @example
 * const store = openStore('/tmp/burrow.db', { envKeysDir: '/tmp/env-keys' }); await store.migrate();
 */
export function openStore(databaseUrl: string, options: OpenStoreOptions = {}): Store {
  const { db, dialect } = openDatabase(databaseUrl);
  const sealer = options.envKeysDir === undefined ? null : new EnvSealer(options.envKeysDir);
  const sandboxes = new SandboxStore(db, undefined, sealer ?? undefined);
  const snapshots = new SnapshotStore(db, undefined, sealer ?? undefined);
  const buckets = new BucketStore(db, sealer ?? undefined);
  return {
    db,
    dialect,
    sandboxes,
    pool: new PoolStore(db, sandboxes),
    keys: new KeyStore(db),
    templates: new TemplateStore(db),
    snapshots,
    tenantDefaults: new TenantDefaultsStore(db),
    audit: new AuditStore(db),
    buckets,
    volumes: new VolumeStore(db),
    sweepEnvKeys: async () => {
      if (sealer === null) return [];
      const live = new Set([
        ...(await sandboxes.listAcrossTenants()).map((r) => r.id),
        ...(await snapshots.listAcrossTenants()).map((r) => r.id),
        ...(await buckets.ids()),
      ]);
      return sealer.sweep(async (ownerId) => live.has(ownerId));
    },
    migrate: () => migrateToLatest(db),
    close: () => db.destroy(),
  };
}
