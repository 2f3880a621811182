// Server configuration: read once from the environment (and overrides) by the composition root, main.ts.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { GvisorPlatform } from '@burrow/runtime-gvisor';
import { DEFAULT_HEAP_HEADROOM_MIB } from './heap-headroom.js';
import { DEFAULT_HTTP_LIMITS, type HttpLimits } from './http/http-limits.js';
import { type PolicyDefaults, policyDefaultsFromEnv } from './lifecycle/policy-defaults.js';
import { type NetworkConfig, networkConfigFrom } from './network-config.js';
import { type PreviewConfig, previewConfigFrom } from './preview-config.js';
import { parseS3Url, type SnapshotStoreConfig } from './services/s3-config.js';
import { parseWarmPool, type WarmPoolTarget } from './services/warm-pool.js';

/** Everything the server needs to know, read once from the environment by {@link loadConfig}. */

export interface Config {
  /** State directory. @default '/var/lib/burrow' (BURROW_DATA_DIR) */
  dataDir: string;
  /** Template cache. @default '<dataDir>/templates' (BURROW_TEMPLATES_DIR) */
  templatesDir: string;
  /** Listen address. @default '127.0.0.1' (BURROW_HOST) */
  host: string;
  /** Listen port; 0 picks a free one. @default 7420 (BURROW_PORT) */
  port: number;
  /**
   * Ports of the E2B-compatible control plane and envd ({@link startServer} only; 0 picks a free one), or null for
   * none. @default { apiPort: 49982, envdPort: 49983 } (BURROW_E2B_API_PORT, BURROW_E2B_ENVD_PORT; BURROW_E2B=0 turns
   * both off)
   */
  e2b: { apiPort: number; envdPort: number } | null;
  /** SQLite file path or `postgres://…`. @default '<dataDir>/burrow.db' (BURROW_DATABASE_URL) */
  databaseUrl: string;
  /** runsc binary. @default 'runsc' (BURROW_RUNSC) */
  runscPath: string;
  /** gVisor platform. @default 'systrap' (BURROW_PLATFORM) */
  platform: GvisorPlatform;
  /**
   * Run exec through the in-sandbox exec agent (docs/adr/0003); off makes every exec a `runsc exec`.
   * @default true (BURROW_EXEC_AGENT=0 turns it off)
   */
  execAgent: boolean;
  /** pino level. @default 'info' (BURROW_LOG_LEVEL) */
  logLevel: string;
  /** Largest JSON body, bytes. @default 16_777_216 (16 MiB) (BURROW_BODY_LIMIT_BYTES) */
  bodyLimitBytes: number;
  /**
   * Timeouts, minimum body rate and connection caps of the HTTP server (README "Configuration"):
   * BURROW_HTTP_HEADERS_TIMEOUT_MS (20_000), BURROW_HTTP_IDLE_TIMEOUT_MS (5_000), BURROW_HTTP_REQUEST_TIMEOUT_MS
   * (60_000), BURROW_HTTP_MIN_BODY_BYTES_PER_SEC (1024), BURROW_HTTP_BODY_RATE_WINDOW_MS (30_000),
   * BURROW_HTTP_MAX_CONNECTIONS_PER_ADDRESS (256), BURROW_HTTP_MAX_REQUESTS_PER_KEY (128); 0 turns a check off
   * (not the headers and idle timeouts).
   */
  httpLimits: HttpLimits;
  /** Time between reconcile passes, ms. @default 30_000 (30 s) (BURROW_RECONCILE_INTERVAL_MS) */
  reconcileIntervalMs: number;
  /**
   * How long host resources no row owns are left alone before the reconciler reaps them, ms.
   * @default 60_000 (60 s) (BURROW_ORPHAN_GRACE_MS)
   */
  /** Milliseconds between per-sandbox CPU/memory/disk samples. @default 5_000 (BURROW_METRICS_SAMPLE_MS) */
  metricsSampleIntervalMs: number;
  orphanGraceMs: number;
  /** Time between lifecycle policy passes (TTL, idle, max age, retention), ms. @default 1000 (1 s) (BURROW_POLICY_INTERVAL_MS) */
  policyIntervalMs: number;
  /**
   * Lifecycle policies a create request leaves out. @default persistent: no TTL, pause after 15 minutes idle, never
   * deleted by policy (BURROW_DEFAULT_TIMEOUT_MS, _TIMEOUT_ACTION, _IDLE_TIMEOUT_MS, _MAX_AGE_MS, _PAUSED_RETENTION_MS,
   * _SNAPSHOT_KEEP_LAST; a duration of `none` turns that policy off)
   */
  policyDefaults: PolicyDefaults;
  /** How long before a deletion by policy its `warning` event comes, ms. @default 300_000 (5 minutes) (BURROW_EXPIRY_WARNING_MS) */
  expiryWarningMs: number;
  /** First webhook retry delay; doubles per attempt, ms. @default 1000 (1 s) (BURROW_WEBHOOK_RETRY_BASE_MS) */
  webhookRetryBaseMs: number;
  /**
   * Let webhooks target loopback, private, link-local and reserved addresses (refused otherwise, at registration
   * and at each delivery, with `webhook_url_forbidden`). @default false (BURROW_WEBHOOK_ALLOW_PRIVATE=1 allows)
   */
  webhookAllowPrivate: boolean;
  /**
   * Ready sandboxes kept per (public template, resources), claimed by creates that match; started by
   * {@link startServer} only. @default base:2 (BURROW_WARM_POOL, `TEMPLATE[@CPU/MEMORY_MIB/DISK_MIB]:COUNT,…`; `none`
   * for no pool)
   */
  warmPool: WarmPoolTarget[];
  /**
   * MiB of V8 old-generation headroom {@link startServer} keeps above the server's live heap (docs/files.md "Upload:
   * heap headroom": with less, each 32 MiB of network reads sets off a full collection). @default 48
   * (BURROW_HEAP_HEADROOM_MIB; 0 leaves V8's heap growing alone)
   */
  heapHeadroomMiB: number;
  /**
   * Encrypt memory images at rest (pause images, memory snapshots; docs/security.md), with the key in `keyFile`
   * (64 hex characters, mode 0600), made once with a random key when `create` is set.
   * @default null: off. BURROW_IMAGE_KEY_FILE=PATH uses the operator's key file; BURROW_IMAGE_ENCRYPTION=1 without it
   *   uses `<dataDir>/image-key`, generated on first start
   */
  imageEncryption: { keyFile: string; create: boolean } | null;
  /**
   * Snapshots in S3 (docs/s3.md) instead of `<dataDir>/snapshots`, or null.
   * @default null. BURROW_SNAPSHOT_STORE=s3://bucket/prefix turns it on, with the standard AWS variables and files
   *   (AWS_ENDPOINT_URL, AWS_REGION, AWS_PROFILE, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY);
   *   BURROW_SNAPSHOT_CACHE_MIB sizes the local cache (default 10_240, 10 GiB); BURROW_SNAPSHOT_DURABLE=s3 makes a
   *   snapshot answer only once it is in S3 (default `local`: it answers once on local disk and uploads behind)
   */
  snapshotStore?: SnapshotStoreConfig | null;
  /**
   * Per-sandbox networks and their defaults (docs/network.md); null: sandboxes have no network. @default on, mode
   * `egress` (BURROW_NETWORK=off, BURROW_NETWORK_DEFAULT, BURROW_NETWORK_NEVER, BURROW_NETWORK_EGRESS_MBPS,
   * BURROW_NETWORK_RESOLVER: see {@link NetworkConfig})
   */
  network?: NetworkConfig | null;
  /**
   * Preview URLs of sandbox ports. @default domain `localhost`, the server's own port (BURROW_PREVIEW_DOMAIN,
   * BURROW_PREVIEW_URL_PORT: see {@link PreviewConfig})
   */
  preview?: PreviewConfig;
  /**
   * TEST HOOK for the kill -9 suite: the named crash point (see `crashPoint` in @burrow/runtime) armed by
   * {@link startServer} after its first reconcile pass; the server SIGKILLs itself when it gets there.
   * @default null: none (BURROW_TEST_CRASH_AT)
   */
  testCrashAt?: string | null;
  /**
   * The audit log: how long records are kept, ms (null: forever), and whether command lines are recorded (they can
   * carry secrets). @default 31_536_000_000 (365 days), no command lines (BURROW_AUDIT_RETENTION_MS, `none` keeps
   * forever; BURROW_AUDIT_COMMAND_LINES=1)
   */
  audit?: AuditConfig;
}

/** See {@link Config.audit}. */
export interface AuditConfig {
  retentionMs: number | null;
  commandLines: boolean;
}

/** Values that win over the environment (CLI flags). */
export type ConfigOverrides = Partial<Config>;

function intFrom(value: string | undefined, name: string, fallback: number): number {
  if (value === undefined || value === '') return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new RangeError(`${name} must be a non-negative integer, got ${value}`);
  return n;
}

/** {@link HttpLimits} from BURROW_HTTP_* variables, each defaulting to {@link DEFAULT_HTTP_LIMITS}. */
function httpLimitsFrom(env: Readonly<Record<string, string | undefined>>): HttpLimits {
  const d = DEFAULT_HTTP_LIMITS;
  const positive = (name: string, fallback: number) => {
    const n = intFrom(env[name], name, fallback);
    if (n === 0) throw new RangeError(`${name} must be positive, got 0`);
    return n;
  };
  return {
    headersTimeoutMs: positive('BURROW_HTTP_HEADERS_TIMEOUT_MS', d.headersTimeoutMs),
    idleTimeoutMs: positive('BURROW_HTTP_IDLE_TIMEOUT_MS', d.idleTimeoutMs),
    requestTimeoutMs: intFrom(env.BURROW_HTTP_REQUEST_TIMEOUT_MS, 'BURROW_HTTP_REQUEST_TIMEOUT_MS', d.requestTimeoutMs),
    minBodyBytesPerSec: intFrom(
      env.BURROW_HTTP_MIN_BODY_BYTES_PER_SEC,
      'BURROW_HTTP_MIN_BODY_BYTES_PER_SEC',
      d.minBodyBytesPerSec,
    ),
    bodyRateWindowMs: positive('BURROW_HTTP_BODY_RATE_WINDOW_MS', d.bodyRateWindowMs),
    maxConnectionsPerAddress: intFrom(
      env.BURROW_HTTP_MAX_CONNECTIONS_PER_ADDRESS,
      'BURROW_HTTP_MAX_CONNECTIONS_PER_ADDRESS',
      d.maxConnectionsPerAddress,
    ),
    maxRequestsPerKey: intFrom(
      env.BURROW_HTTP_MAX_REQUESTS_PER_KEY,
      'BURROW_HTTP_MAX_REQUESTS_PER_KEY',
      d.maxRequestsPerKey,
    ),
  };
}

/**
 * Build the config from `env` (normally `process.env`) and `overrides`.
 * @throws RangeError when a numeric variable is not a non-negative integer, or the platform is unknown
 * @example
 * const config = loadConfig(process.env, { port: 0 });
 */
export function loadConfig(env: Readonly<Record<string, string | undefined>>, overrides: ConfigOverrides = {}): Config {
  const dataDir = overrides.dataDir ?? env.BURROW_DATA_DIR ?? '/var/lib/burrow';
  const platform = overrides.platform ?? env.BURROW_PLATFORM ?? 'systrap';
  if (platform !== 'systrap' && platform !== 'ptrace') {
    throw new RangeError(`BURROW_PLATFORM must be systrap or ptrace, got ${platform}`);
  }
  return {
    dataDir,
    templatesDir: overrides.templatesDir ?? env.BURROW_TEMPLATES_DIR ?? join(dataDir, 'templates'),
    host: overrides.host ?? env.BURROW_HOST ?? '127.0.0.1',
    port: overrides.port ?? intFrom(env.BURROW_PORT, 'BURROW_PORT', 7420),
    e2b:
      overrides.e2b !== undefined
        ? overrides.e2b
        : env.BURROW_E2B === '0'
          ? null
          : {
              apiPort: intFrom(env.BURROW_E2B_API_PORT, 'BURROW_E2B_API_PORT', 49982),
              envdPort: intFrom(env.BURROW_E2B_ENVD_PORT, 'BURROW_E2B_ENVD_PORT', 49983),
            },
    databaseUrl: overrides.databaseUrl ?? env.BURROW_DATABASE_URL ?? join(dataDir, 'burrow.db'),
    runscPath: overrides.runscPath ?? env.BURROW_RUNSC ?? 'runsc',
    platform,
    execAgent: overrides.execAgent ?? env.BURROW_EXEC_AGENT !== '0',
    logLevel: overrides.logLevel ?? env.BURROW_LOG_LEVEL ?? 'info',
    bodyLimitBytes:
      overrides.bodyLimitBytes ?? intFrom(env.BURROW_BODY_LIMIT_BYTES, 'BURROW_BODY_LIMIT_BYTES', 16 * 1024 * 1024),
    httpLimits: overrides.httpLimits ?? httpLimitsFrom(env),
    reconcileIntervalMs:
      overrides.reconcileIntervalMs ??
      intFrom(env.BURROW_RECONCILE_INTERVAL_MS, 'BURROW_RECONCILE_INTERVAL_MS', 30_000),
    orphanGraceMs: overrides.orphanGraceMs ?? intFrom(env.BURROW_ORPHAN_GRACE_MS, 'BURROW_ORPHAN_GRACE_MS', 60_000),
    metricsSampleIntervalMs:
      overrides.metricsSampleIntervalMs ?? intFrom(env.BURROW_METRICS_SAMPLE_MS, 'BURROW_METRICS_SAMPLE_MS', 5_000),
    policyIntervalMs:
      overrides.policyIntervalMs ?? intFrom(env.BURROW_POLICY_INTERVAL_MS, 'BURROW_POLICY_INTERVAL_MS', 1000),
    policyDefaults: overrides.policyDefaults ?? policyDefaultsFromEnv(env),
    expiryWarningMs:
      overrides.expiryWarningMs ?? intFrom(env.BURROW_EXPIRY_WARNING_MS, 'BURROW_EXPIRY_WARNING_MS', 300_000),
    webhookRetryBaseMs:
      overrides.webhookRetryBaseMs ?? intFrom(env.BURROW_WEBHOOK_RETRY_BASE_MS, 'BURROW_WEBHOOK_RETRY_BASE_MS', 1000),
    webhookAllowPrivate:
      overrides.webhookAllowPrivate ?? ['1', 'true'].includes(env.BURROW_WEBHOOK_ALLOW_PRIVATE ?? ''),
    warmPool: overrides.warmPool ?? parseWarmPool(env.BURROW_WARM_POOL ?? 'base:2'),
    heapHeadroomMiB:
      overrides.heapHeadroomMiB ??
      intFrom(env.BURROW_HEAP_HEADROOM_MIB, 'BURROW_HEAP_HEADROOM_MIB', DEFAULT_HEAP_HEADROOM_MIB),
    imageEncryption: overrides.imageEncryption ?? imageEncryptionFrom(env, dataDir),
    snapshotStore: overrides.snapshotStore ?? snapshotStoreFrom(env),
    testCrashAt: overrides.testCrashAt ?? env.BURROW_TEST_CRASH_AT ?? null,
    audit: overrides.audit ?? {
      retentionMs:
        env.BURROW_AUDIT_RETENTION_MS === 'none'
          ? null
          : intFrom(env.BURROW_AUDIT_RETENTION_MS, 'BURROW_AUDIT_RETENTION_MS', 365 * 24 * 3600 * 1000),
      commandLines: ['1', 'true'].includes(env.BURROW_AUDIT_COMMAND_LINES ?? ''),
    },
    preview: overrides.preview ?? previewConfigFrom(env),
    network:
      overrides.network !== undefined
        ? overrides.network
        : networkConfigFrom(env, () => readFileSync('/etc/resolv.conf', 'utf8')),
  };
}

/** {@link Config.snapshotStore} from BURROW_SNAPSHOT_STORE, BURROW_SNAPSHOT_CACHE_MIB, BURROW_SNAPSHOT_DURABLE. */
function snapshotStoreFrom(env: Readonly<Record<string, string | undefined>>): SnapshotStoreConfig | null {
  const url = env.BURROW_SNAPSHOT_STORE ?? '';
  const durable = env.BURROW_SNAPSHOT_DURABLE ?? 'local';
  if (durable !== 'local' && durable !== 's3') {
    throw new RangeError(`BURROW_SNAPSHOT_DURABLE must be local or s3, got ${durable}`);
  }
  if (url === '') {
    if (durable === 's3') throw new RangeError('BURROW_SNAPSHOT_DURABLE=s3 needs BURROW_SNAPSHOT_STORE=s3://…');
    return null;
  }
  return {
    location: parseS3Url(url),
    endpoint: env.AWS_ENDPOINT_URL || null,
    region: env.AWS_REGION || env.AWS_DEFAULT_REGION || null,
    cacheMiB: intFrom(env.BURROW_SNAPSHOT_CACHE_MIB, 'BURROW_SNAPSHOT_CACHE_MIB', 10_240),
    durable: durable === 's3',
  };
}

/** {@link Config.imageEncryption} from BURROW_IMAGE_KEY_FILE and BURROW_IMAGE_ENCRYPTION. */
function imageEncryptionFrom(
  env: Readonly<Record<string, string | undefined>>,
  dataDir: string,
): Config['imageEncryption'] {
  const keyFile = env.BURROW_IMAGE_KEY_FILE ?? '';
  const on = env.BURROW_IMAGE_ENCRYPTION ?? '';
  if (!['', '0', '1', 'false', 'true'].includes(on)) {
    throw new RangeError(`BURROW_IMAGE_ENCRYPTION must be 1 or 0, got ${on}`);
  }
  if (keyFile !== '') {
    if (on === '0' || on === 'false') {
      throw new RangeError('BURROW_IMAGE_KEY_FILE is set while BURROW_IMAGE_ENCRYPTION turns encryption off');
    }
    return { keyFile, create: false };
  }
  return on === '1' || on === 'true' ? { keyFile: join(dataDir, 'image-key'), create: true } : null;
}
