import type { Kysely } from 'kysely';
import { type DB, type Dialect, openDatabase } from './database.js';
import { KeyStore } from './key-store.js';
import { migrateToLatest } from './migrations.js';
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
  return {
    db,
    dialect,
    sandboxes: new SandboxStore(db),
    keys: new KeyStore(db),
    templates: new TemplateStore(db),
    snapshots: new SnapshotStore(db),
    migrate: () => migrateToLatest(db),
    close: () => db.destroy(),
  };
}
