import Database from 'better-sqlite3';
import { type Generated, Kysely, PostgresDialect, type SqliteDatabase, SqliteDialect } from 'kysely';
import pg from 'pg';

/** `api_keys`: one row per key; only the sha256 of the secret is kept. */
export interface ApiKeysTable {
  id: string;
  tenant_id: string;
  name: string;
  role: string;
  prefix: string;
  /** sha256 of the secret, hex. */
  secret_hash: string;
  created_at: string;
  revoked_at: string | null;
  /** JSON array of scopes; null: every scope the role allows. */
  scopes: string | null;
  /** JSON `KeyRestriction`; null: the whole tenant. */
  restriction: string | null;
  /** The sandbox of a `sandbox` restriction (indexed: deleting the sandbox revokes its keys). */
  restrict_sandbox_id: string | null;
  expires_at: string | null;
  last_used_at: string | null;
}

/** `sandboxes`: desired and observed state of each sandbox. JSON columns are text. */
export interface SandboxesTable {
  id: string;
  tenant_id: string;
  template: string;
  template_id: string;
  state: string;
  /** JSON array of conditions. */
  conditions: string;
  /** JSON object of env variables. */
  env: string;
  /** JSON object of labels (the filterable copy lives in `sandbox_labels`). */
  labels: string;
  cwd: string;
  hostname: string;
  cpu_count: number;
  memory_mib: number;
  disk_mib: number;
  timeout_ms: number | null;
  expires_at: string | null;
  created_at: string;
  updated_at: string;
  /** Incremented by every write; writes are fenced on the version they read. */
  version: number;
  /** What the API asked for (`running | paused | stopped | deleted`); null on rows from before 0100 (running). */
  desired_state: string | null;
  /** 1 when exec and file calls resume the sandbox from paused; null on old rows (yes). */
  auto_resume: number | null;
  /** The sandbox this one was forked from. */
  parent_id: string | null;
  /** The snapshot this one was restored from. */
  snapshot_id: string | null;
  /** JSON network policy; null on rows from before 0500 (mode `none`). */
  network?: string | null;
  /** JSON `{ at, reason, by }` while the sandbox is quarantined (0400); null otherwise. */
  quarantine?: string | null;
  /** What the TTL does (`pause | stop | delete`); null on old rows (delete). From 0300. */
  timeout_action?: string | null;
  idle_timeout_ms?: number | null;
  max_age_ms?: number | null;
  paused_retention_ms?: number | null;
  snapshot_keep_last?: number | null;
  /** When the sandbox last became paused (ISO-8601); null when it is not paused. */
  paused_at?: string | null;
  /** JSON: per policy, where its value comes from (2400); null on older rows. */
  policy_sources?: string | null;
  /** The deletion deadline (ISO-8601) the last expiry warning event was about. */
  expiry_warned_for?: string | null;
  /** When that warning was recorded. */
  expiry_warned_at?: string | null;
}

/** `snapshots`: immutable records of a sandbox's state; the bytes live in the BlobStore under `id`. */
export interface SnapshotsTable {
  id: string;
  tenant_id: string;
  /** Null for unnamed snapshots, which are deleted with their sandbox. */
  name: string | null;
  sandbox_id: string;
  template: string;
  template_id: string;
  /** 1 when it holds processes and memory. */
  memory: number;
  /** `creating` until its bytes are durable, then `ready`. */
  state: string;
  image_size_bytes: number;
  disk_size_bytes: number;
  runtime_version: string;
  /** JSON: env, cwd, resources and autoResume of the source sandbox, for sandboxes made from it. */
  settings: string;
  created_at: string;
  /** Retention deadline (ISO-8601), or null. From 0300. */
  expires_at?: string | null;
  /** When retention deletes it (ISO-8601), set with its warning event; null while not warned. From 0800. */
  retention_delete_at?: string | null;
}

/** `events`: every lifecycle transition, in `seq` order (the public event id). */
export interface EventsTable {
  seq: Generated<number>;
  tenant_id: string;
  type: string;
  sandbox_id: string | null;
  snapshot_id: string | null;
  reason: string;
  /** `key_…` or `system:reconciler`. */
  actor: string;
  message: string;
  /** JSON object. */
  data: string;
  at: string;
}

/** `webhooks`: per-tenant receivers of events; the secret signs deliveries (HMAC-SHA256). */
export interface WebhooksTable {
  id: string;
  tenant_id: string;
  url: string;
  secret: string;
  /** JSON array of event types, or null for all. */
  types: string | null;
  created_at: string;
}

/** `webhook_deliveries`: one row per (webhook, event); retried with backoff until delivered or failed. */
export interface WebhookDeliveriesTable {
  id: string;
  webhook_id: string;
  event_seq: number;
  /** `pending | delivered | failed` */
  state: string;
  attempts: number;
  next_attempt_at: string;
  last_status: number | null;
  last_error: string | null;
  updated_at: string;
}

/** `tenant_quotas`: limits per tenant (null: unlimited); its row is also the lock that serializes quota checks. */
export interface TenantQuotasTable {
  tenant_id: string;
  max_running: number | null;
  max_sandboxes: number | null;
  max_disk_bytes: number | null;
  max_snapshots: number | null;
  /** From 2100. */
  max_volumes?: number | null;
  max_volume_bytes?: number | null;
  updated_at: string;
}

/** `volumes` (2100): a tenant's volumes, volume snapshots and forks; the bytes live in the VolumeHost under `id`. */
export interface VolumesTable {
  id: string;
  tenant_id: string;
  name: string;
  /** `volume | snapshot`. */
  kind: string;
  size_mib: number;
  /** JSON object of labels (the filterable copy lives in `volume_labels`). */
  labels: string;
  /** 1 when several sandboxes may mount it read-write. */
  shared: number;
  /** `creating` until its storage exists, then `ready`; `deleting` while it goes. */
  state: string;
  source_id: string | null;
  copy_method: string | null;
  expires_at: string | null;
  created_at: string;
  updated_at: string;
}

/** `volume_labels` (2100): one row per label of a volume, for filtering. */
export interface VolumeLabelsTable {
  tenant_id: string;
  volume_id: string;
  key: string;
  value: string;
}

/** `volume_mounts` (2100): which sandbox mounts which volume where. */
export interface VolumeMountsTable {
  sandbox_id: string;
  volume_id: string;
  tenant_id: string;
  path: string;
  read_only: number;
  /** Order in the create request. */
  position: number;
}

/** `tenant_policy_defaults`: a tenant's lifecycle policy defaults, JSON of the fields an admin set. */
export interface TenantPolicyDefaultsTable {
  tenant_id: string;
  defaults: string;
  updated_at: string;
}

/** `sandbox_labels`: one row per label, for portable `key=value` filters. */
export interface SandboxLabelsTable {
  tenant_id: string;
  sandbox_id: string;
  key: string;
  value: string;
}

/** `templates`: registered templates; `tenant_id` is `public` for the shared base template. */
export interface TemplatesTable {
  tenant_id: string;
  name: string;
  /** Content address; empty while building. */
  id: string;
  state: string;
  from_name: string | null;
  /** JSON array of package names. */
  apt: string;
  /** JSON array of commands. */
  run: string;
  size_bytes: number;
  error: string | null;
  created_at: string;
}

/** `sandbox_public_ports`: the ports of a sandbox whose preview URL answers anyone (docs/network.md). */
export interface SandboxPublicPortsTable {
  sandbox_id: string;
  port: number;
  created_at: string;
}

/** `secrets`: a tenant's secrets for egress; `sealed_value` is AES-256-GCM under the data dir's secret key. */
export interface SecretsTable {
  tenant_id: string;
  name: string;
  /** JSON array of domains and wildcards. */
  hosts: string;
  header: string | null;
  format: string | null;
  sealed_value: string;
  created_at: string;
  rotated_at: string | null;
}

/** `sandbox_secrets`: which secrets a sandbox holds placeholders of (copied to fork children). */
export interface SandboxSecretsTable {
  sandbox_id: string;
  tenant_id: string;
  name: string;
  env: string;
  placeholder: string;
}

/** The one schema type both dialects share. */
/** `buckets`: a tenant's named S3 credentials; `secret` is sealed with the key of owner `id` (`bkt_…`). */
export interface BucketsTable {
  id: string;
  tenant_id: string;
  name: string;
  bucket: string;
  endpoint: string;
  region: string;
  access_key_id: string;
  secret: string;
  path_style: number;
  created_at: string;
}

export interface DB {
  buckets: BucketsTable;
  api_keys: ApiKeysTable;
  sandboxes: SandboxesTable;
  sandbox_labels: SandboxLabelsTable;
  templates: TemplatesTable;
  snapshots: SnapshotsTable;
  events: EventsTable;
  webhooks: WebhooksTable;
  webhook_deliveries: WebhookDeliveriesTable;
  tenant_quotas: TenantQuotasTable;
  tenant_policy_defaults: TenantPolicyDefaultsTable;
  audit_log: AuditLogTable;
  audit_state: AuditStateTable;
  sandbox_public_ports: SandboxPublicPortsTable;
  secrets: SecretsTable;
  sandbox_secrets: SandboxSecretsTable;
  volumes: VolumesTable;
  volume_labels: VolumeLabelsTable;
  volume_mounts: VolumeMountsTable;
}

/** `audit_log`: one hash-chained record per changing or refused request (append-only). */
export interface AuditLogTable {
  seq: number;
  at: string;
  tenant_id: string | null;
  key_id: string | null;
  key_name: string | null;
  source_address: string;
  request_id: string;
  action: string;
  target: string | null;
  result: string;
  status: number;
  error_code: string | null;
  /** JSON object or null. */
  details: string | null;
  prev_hash: string;
  hash: string;
}

/** `audit_state`: one row (id 1): the chain's newest record and where retention cut it. */
export interface AuditStateTable {
  id: number;
  /** Seq of the newest record appended. */
  head_seq: number;
  /** Records up to this seq were removed by retention (0: none). */
  pruned_through_seq: number;
  /** Hash of the record at `pruned_through_seq` (the first kept record's expected prevHash). */
  pruned_hash: string;
}

/** Which SQL engine a database runs on. */
export type Dialect = 'sqlite' | 'postgres';

/** An open database and its dialect. */
export interface Database_ {
  db: Kysely<DB>;
  dialect: Dialect;
}

/**
 * Open the database at `url`: `postgres://…` or `postgresql://…` selects PostgreSQL, anything else is a SQLite
 * file path (opened in WAL mode, created if missing).
 * @example
 * const { db } = openDatabase('/var/lib/burrow/burrow.db');
 */
export function openDatabase(url: string): Database_ {
  if (/^postgres(ql)?:\/\//.test(url)) {
    const pool = new pg.Pool({ connectionString: url, max: 10 });
    return { db: new Kysely<DB>({ dialect: new PostgresDialect({ pool }) }), dialect: 'postgres' };
  }
  const sqlite = new Database(url);
  sqlite.pragma('journal_mode = WAL');
  sqlite.pragma('busy_timeout = 5000');
  sqlite.pragma('foreign_keys = ON');
  return {
    db: new Kysely<DB>({ dialect: new SqliteDialect({ database: reusingStatements(sqlite) }) }),
    dialect: 'sqlite',
  };
}

/** Prepared statements kept per SQLite database, by SQL text (least recently used dropped first). */
export const SQLITE_STATEMENT_CACHE_SIZE = 256;

/**
 * `sqlite` for kysely with its prepared statements reused by SQL text. Kysely prepares every query anew, and
 * preparing costs more CPU than running the small indexed queries of a request (~0.2–0.4 ms against ~0.01 ms on a
 * loaded 2-core host; two per exec: the key and the sandbox row). Kysely runs one query at a time on the connection
 * and reads a statement's rows before the next query, so reuse is safe; a statement still iterating (a streamed
 * select) is never handed out again (a fresh one is prepared instead).
 * @param sizeStatements statements kept @default {@link SQLITE_STATEMENT_CACHE_SIZE}
 */
export function reusingStatements(
  sqlite: Database.Database,
  sizeStatements = SQLITE_STATEMENT_CACHE_SIZE,
): SqliteDatabase {
  const cache = new Map<string, Database.Statement>();
  return {
    close: () => {
      cache.clear();
      sqlite.close();
    },
    prepare: (sql) => {
      const cached = cache.get(sql);
      if (cached !== undefined && !cached.busy) {
        // Most recently used last: the first key is the one to drop.
        cache.delete(sql);
        cache.set(sql, cached);
        return cached;
      }
      const statement = sqlite.prepare(sql);
      if (cached === undefined) {
        cache.set(sql, statement);
        if (cache.size > sizeStatements) cache.delete(cache.keys().next().value as string);
      }
      return statement;
    },
  };
}
