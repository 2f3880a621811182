import type { Kysely } from 'kysely';
import { type DB, type Dialect, openDatabase } from './database.js';
import { KeyStore } from './key-store.js';
import { migrateToLatest } from './migrations.js';
import { PoolStore } from './pool-store.js';
import { SandboxStore } from './sandbox-store.js';
import { SnapshotStore } from './snapshot-store.js';
import { TemplateStore } from './template-store.js';

/** Every table's accessors over one database connection. */
export interface Store {
  readonly db: Kysely<DB>;
  readonly dialect: Dialect;
  readonly sandboxes: SandboxStore;
  readonly keys: KeyStore;
  readonly templates: TemplateStore;
  readonly snapshots: SnapshotStore;
  /** Warm-pool rows (tenant `_pool`) and the atomic claim. */
  readonly pool: PoolStore;
  /** Apply pending migrations. */
  migrate(): Promise<void>;
  /** Close the connection (pool). */
  close(): Promise<void>;
}

/**
 * Open the store at `databaseUrl` (SQLite path, or `postgres://…`). Call `migrate()` before use.
 * @example
 * const store = openStore('/tmp/burrow.db'); await store.migrate();
 */
export function openStore(databaseUrl: string): Store {
  const { db, dialect } = openDatabase(databaseUrl);
  const sandboxes = new SandboxStore(db);
  return {
    db,
    dialect,
    sandboxes,
    pool: new PoolStore(db, sandboxes),
    keys: new KeyStore(db),
    templates: new TemplateStore(db),
    snapshots: new SnapshotStore(db),
    migrate: () => migrateToLatest(db),
    close: () => db.destroy(),
  };
}
