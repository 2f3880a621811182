import { readFileSync } from 'node:fs';
import { chmod, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Template } from '@burrow/contract';
import { armCrashPoint, type RuntimeDriver } from '@burrow/runtime';
import { GvisorDriver, type GvisorPlatform, loadImageKey, type SandboxNetworks } from '@burrow/runtime-gvisor';
import { type Logger, pino } from 'pino';
import { lockDataDir, prepareDataDir } from './data-dir.js';
import { DEFAULT_HEAP_HEADROOM_MIB, installHeapHeadroom } from './heap-headroom.js';
import { buildApp } from './http/app.js';
import { buildE2bServers, type E2bServers } from './http/e2b/e2b-servers.js';
import { DEFAULT_HTTP_LIMITS, type HttpLimits } from './http/http-limits.js';
import type { ZodApp } from './http/zod-app.js';
import { ActivityTracker } from './lifecycle/activity-tracker.js';
import { ActorContext } from './lifecycle/actor-context.js';
import { hasRunningCommand } from './lifecycle/command-activity-probe.js';
import { type PolicyDefaults, policyDefaultsFromEnv } from './lifecycle/policy-defaults.js';
import { PolicyEnforcer } from './lifecycle/policy-enforcer.js';
import { Reconciler } from './lifecycle/reconciler.js';
import { type NetworkConfig, networkConfigFrom } from './network-config.js';
import { GvisorTemplateBuilder } from './node/gvisor-template-builder.js';
import { startSandboxDns } from './sandbox-dns.js';
import { type BlobStore, LocalDirBlobStore } from './services/blob-store.js';
import { CommandService } from './services/command-service.js';
import { EventService } from './services/event-service.js';
import { ExecService } from './services/exec-service.js';
import { FileService } from './services/file-service.js';
import { FsHolders, releasingDriver } from './services/fs-holders.js';
import { type HostCapacity, hostCapacity } from './services/host-capacity.js';
import { HygieneService } from './services/hygiene-service.js';
import { KeyService } from './services/key-service.js';
import { Metrics, type MetricsSources } from './services/metrics.js';
import { NetworkService } from './services/network-service.js';
import { PolicyService } from './services/policy-service.js';
import { QuotaService } from './services/quota-service.js';
import { openS3SnapshotStore, parseS3Url, type SnapshotStoreConfig } from './services/s3-config.js';
import { SandboxService } from './services/sandbox-service.js';
import type { Services } from './services/services.js';
import { type TemplateBuilder, TemplateService } from './services/template-service.js';
import { TenantDefaultsService } from './services/tenant-defaults-service.js';
import { parseWarmPool, WarmPool, type WarmPoolTarget } from './services/warm-pool.js';
import { WebhookDispatcher } from './services/webhook-dispatcher.js';
import { EventStore } from './store/event-store.js';
import { openStore, type Store } from './store/store.js';
import { type Clock, systemClock } from './util/clock.js';
import { KeyedMutex } from './util/keyed-mutex.js';

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
   * TEST HOOK for the kill -9 suite: the named crash point (see `crashPoint` in @burrow/runtime) armed by
   * {@link startServer} after its first reconcile pass; the server SIGKILLs itself when it gets there.
   * @default null: none (BURROW_TEST_CRASH_AT)
   */
  testCrashAt?: string | null;
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

/** Parts {@link createBurrow} would otherwise build itself (tests inject fakes here). */
export interface BurrowDeps {
  driver?: RuntimeDriver;
  templateBuilder?: TemplateBuilder;
  capacity?: HostCapacity;
  /** Where snapshots are kept. @default a LocalDirBlobStore in `<dataDir>/snapshots` */
  blobs?: BlobStore;
  clock?: Clock;
  logger?: Logger;
}

/** A composed server, not yet listening. */
export interface Burrow {
  app: ZodApp;
  services: Services;
  store: Store;
  driver: RuntimeDriver;
  reconciler: Reconciler;
  /** Prometheus metrics of this server (its own registry). */
  metrics: Metrics;
  /** Lifecycle policy loop (started by {@link startServer}). */
  policies: PolicyEnforcer;
  /** The E2B-compatible control plane and envd (listening only under {@link startServer}). */
  e2b: E2bServers;
  /** Webhook delivery loop (started by {@link startServer}). */
  webhooks: WebhookDispatcher;
  /** The warm pool (not running until {@link startServer} or `pool.start()`). */
  pool: WarmPool;
  /**
   * The sandboxes' networks on this host (absent with networking off or another driver): the DNS resolver's seam,
   * `networks.resolver` (where it listens), `sandboxForSourceAddress` and `allowResolvedAddresses`.
   */
  networks?: SandboxNetworks | undefined;
  logger: Logger;
  /** Stop the reconciler, close the app and the database. */
  close(): Promise<void>;
}

/**
 * Compose store (migrated), driver, services, reconciler and app from `config`.
 * @throws Error when the database cannot be opened or migrated
 * @example
 * const burrow = await createBurrow(loadConfig(process.env));
 */
export async function createBurrow(config: Config, deps: BurrowDeps = {}): Promise<Burrow> {
  await prepareDataDir(config.dataDir);
  const logger = deps.logger ?? pino({ level: config.logLevel }, pino.destination(2));
  const clock = deps.clock ?? systemClock;
  const fsHolders = new FsHolders();
  const runtime =
    deps.driver ??
    new GvisorDriver({
      dataDir: config.dataDir,
      runscPath: config.runscPath,
      platform: config.platform,
      execAgent: config.execAgent,
      logger: logger.child({ component: 'driver' }),
      ...(config.imageEncryption === null
        ? {}
        : { imageEncryption: { key: await loadImageKey(config.imageEncryption) } }),
      ...(config.network == null
        ? {}
        : {
            network: {
              never: config.network.never,
              ...(config.network.egressMbps === null ? {} : { defaultEgressMbps: config.network.egressMbps }),
              ...(config.network.resolver === null ? {} : { resolver: config.network.resolver }),
            },
          }),
    });
  const networks = runtime instanceof GvisorDriver ? runtime.networks : undefined;
  // The host gateway and rules exist, and the resolver listens, before a sandbox starts.
  const resolver =
    networks === undefined
      ? undefined
      : await startSandboxDns(networks, config.network, logger.child({ component: 'sandbox-dns' }));
  const driver = releasingDriver(runtime, fsHolders);
  const builder =
    deps.templateBuilder ??
    new GvisorTemplateBuilder({ templatesDir: config.templatesDir, runscPath: config.runscPath });
  const store = openStore(config.databaseUrl, { envKeysDir: join(config.dataDir, 'env-keys') });
  await store.migrate();
  await store.sweepEnvKeys();
  await store.templates.failInterruptedBuilds(
    'the server stopped during the build; delete the template and build again',
  );
  const mutex = new KeyedMutex();
  const metrics = new Metrics();
  const activity = new ActivityTracker(clock);
  const actors = new ActorContext();
  const eventStore = new EventStore(store.db);
  const events = new EventService({
    events: eventStore,
    actors,
    clock,
    logger,
    allowInternalWebhooks: config.webhookAllowPrivate,
  });
  store.sandboxes.onTransition = (trx, before, after) => events.onSandboxTransition(trx, before, after);
  store.sandboxes.quotas.onDenied = (denial) => events.onQuotaDenied(denial);
  store.snapshots.quotas.onDenied = (denial) => events.onQuotaDenied(denial);
  const webhooks = new WebhookDispatcher({
    events: eventStore,
    clock,
    logger: logger.child({ component: 'webhooks' }),
    retryBaseMs: config.webhookRetryBaseMs,
    allowInternalTargets: config.webhookAllowPrivate,
  });
  events.onAppended = () => webhooks.kick();
  const s3 =
    deps.blobs === undefined && config.snapshotStore != null
      ? await openS3SnapshotStore(config.snapshotStore, {
          cacheDir: join(config.dataDir, 'snapshot-cache'),
          logger: logger.child({ component: 'snapshot-store' }),
        })
      : null;
  const blobs = deps.blobs ?? s3 ?? new LocalDirBlobStore(join(config.dataDir, 'snapshots'));
  const keys = new KeyService({ keys: store.keys, clock, logger });
  const templates = new TemplateService({
    templates: store.templates,
    sandboxes: store.sandboxes,
    builder,
    clock,
    logger,
  });
  const pool = new WarmPool(
    {
      pool: store.pool,
      sandboxes: store.sandboxes,
      templates,
      driver,
      mutex,
      clock,
      logger: logger.child({ component: 'warm-pool' }),
      deleteUnderLock: (record) => sandboxes.deleteUnderLock(record),
    },
    config.warmPool,
  );
  const tenantDefaults = new TenantDefaultsService({
    store: store.tenantDefaults,
    serverDefaults: config.policyDefaults,
    clock,
  });
  const sandboxes: SandboxService = new SandboxService({
    pool,
    network: { defaultMode: config.network?.defaultMode ?? 'none' },
    sandboxes: store.sandboxes,
    templates,
    driver,
    activity,
    expiryWarningMs: config.expiryWarningMs,
    policyDefaults: config.policyDefaults,
    tenantDefaults,
    events,
    capacity: deps.capacity ?? hostCapacity(config.dataDir),
    snapshots: store.snapshots,
    blobs,
    mutex,
    clock,
    logger,
    metrics,
  });
  const services: Services = {
    keys,
    templates,
    sandboxes,
    exec: new ExecService({ sandboxes, driver, mutex, clock, logger, activity }),
    commands: new CommandService({ sandboxes, driver, mutex, clock, logger }),
    files: new FileService({
      sandboxes,
      driver,
      mutex,
      holders: fsHolders,
      onSwept: (sandboxId, names) =>
        logger.warn({ sandboxId, names }, 'removed temporary files of uploads a stopped server left'),
    }),
    hygiene: new HygieneService({
      sandboxes: store.sandboxes,
      service: sandboxes,
      templates,
      blobs,
      driver,
      mutex,
      clock,
      logger,
      metrics,
    }),
    metrics,
    events,
    policies: new PolicyService({
      sandboxes: store.sandboxes,
      snapshots: store.snapshots,
      service: sandboxes,
      activity,
      mutex,
      clock,
    }),
    quotas: new QuotaService({ quotas: store.sandboxes.quotas, clock }),
    network: new NetworkService({ sandboxes: store.sandboxes, driver, mutex, clock, logger }),
    tenantDefaults,
    activity,
    driverName: driver.name,
  };
  const reconciler = new Reconciler({
    sandboxes: store.sandboxes,
    snapshots: store.snapshots,
    blobs,
    service: sandboxes,
    driver,
    mutex,
    clock,
    logger,
    metrics,
    orphanGraceMs: config.orphanGraceMs,
    actors,
  });
  metrics.setSources(metricsSources(store, driver));
  const policies = new PolicyEnforcer({
    sandboxes: store.sandboxes,
    snapshots: store.snapshots,
    blobs,
    service: sandboxes,
    driver,
    events,
    activity,
    actors,
    mutex,
    clock,
    logger: logger.child({ component: 'policies' }),
    warningMs: config.expiryWarningMs,
    busyProbe: (record) => hasRunningCommand(driver, services.commands, record.id),
  });
  const app = await buildApp({
    services,
    logger,
    bodyLimitBytes: config.bodyLimitBytes,
    httpLimits: config.httpLimits,
    actors,
  });
  const e2b = await buildE2bServers({ services, sandboxes: store.sandboxes, driver, dataDir: config.dataDir, logger });
  return {
    app,
    e2b,
    services,
    metrics,
    store,
    driver,
    reconciler,
    policies,
    webhooks,
    pool,
    networks,
    logger,
    close: async () => {
      await pool.stop();
      await policies.stop();
      await webhooks.stop();
      await reconciler.stop();
      s3?.close();
      await events.flush();
      await e2b.close();
      await app.close();
      await driver.close?.();
      await resolver?.close();
      await store.close();
    },
  };
}

/** Scrape-time values of {@link Metrics}: rows by state, quarantined rows, disk bytes per tenant. */
function metricsSources(store: Store, driver: RuntimeDriver): MetricsSources {
  return {
    sandboxesByState: async () => {
      const counts = new Map<string, number>();
      for (const row of await store.sandboxes.listAcrossTenants())
        counts.set(row.state, (counts.get(row.state) ?? 0) + 1);
      return counts;
    },
    quarantinedCount: async () =>
      (await store.sandboxes.listAcrossTenants()).filter(
        (row) => row.quarantine !== undefined && row.quarantine !== null,
      ).length,
    diskBytesByTenant: async () => {
      const bytes = new Map<string, number>();
      const add = (tenant: string, value: number) => bytes.set(tenant, (bytes.get(tenant) ?? 0) + value);
      for (const row of await store.sandboxes.listAcrossTenants()) {
        add(row.tenantId, (await driver.diskUsageBytes?.(row.id).catch(() => 0)) ?? 0);
      }
      for (const snapshot of await store.snapshots.listAcrossTenants()) {
        add(snapshot.tenantId, snapshot.imageSizeBytes + snapshot.diskSizeBytes);
      }
      return bytes;
    },
    networkBytes: async () => {
      const rows = [];
      for (const row of await store.sandboxes.listAcrossTenants()) {
        const usage = await driver.networkUsage?.(row.id).catch(() => null);
        if (usage) rows.push({ sandboxId: row.id, tenant: row.tenantId, ...usage });
      }
      return rows;
    },
  };
}

/**
 * Create the first admin key if none exists: secret written to `<dataDir>/admin-key` (mode 0600).
 * @returns the key file path and the secret when it was just created (null otherwise)
 */
async function ensureAdminKey(burrow: Burrow, dataDir: string): Promise<{ path: string; secret: string | null }> {
  const path = join(dataDir, 'admin-key');
  const secret = await burrow.services.keys.ensureAdminKey();
  if (secret !== null) {
    await writeFile(path, `${secret}\n`, { mode: 0o600 });
    await chmod(path, 0o600);
  }
  return { path, secret };
}

/**
 * Start the server: migrations, admin key (printed once to stdout when created), reconciler loop, the V8 heap
 * headroom policy of this process ({@link installHeapHeadroom}), listen.
 * @returns the base URL and a close function
 * @throws Error when the port is taken or the database fails
 * @example
 * const server = await startServer(loadConfig(process.env)); await server.close();
 */
export async function startServer(
  config: Config,
  deps: BurrowDeps = {},
): Promise<{
  url: string;
  /** Base URLs of the E2B control plane and envd, when {@link Config.e2b} is set. */
  e2b: { apiUrl: string; envdUrl: string } | null;
  burrow: Burrow;
  close(): Promise<void>;
}> {
  // Before anything touches the database or the sandboxes: one server per data dir.
  await prepareDataDir(config.dataDir);
  const lock = await lockDataDir(config.dataDir);
  let burrow: Burrow;
  try {
    burrow = await createBurrow(config, deps);
  } catch (error) {
    lock.release();
    throw error;
  }
  const heap = installHeapHeadroom({ headroomMiB: config.heapHeadroomMiB });
  const close = async () => {
    heap.close();
    await burrow.close();
    lock.release();
  };
  try {
    const key = await ensureAdminKey(burrow, config.dataDir);
    if (key.secret !== null) {
      process.stdout.write(`Created the admin API key (saved to ${key.path}; shown only now):\n${key.secret}\n`);
    }
    await burrow.reconciler.reconcileOnce();
    // Temporary files of uploads a killed server left half-written go before this process takes any upload.
    const rows = await burrow.store.sandboxes.listAcrossTenants();
    await burrow.services.files.sweepRunning(rows.filter((r) => r.state === 'running'));
    // Armed only now: the first pass finishes what a previous crash interrupted, which must not crash again.
    armCrashPoint(config.testCrashAt ?? null);
    burrow.reconciler.start(config.reconcileIntervalMs);
    burrow.policies.start(config.policyIntervalMs);
    burrow.webhooks.start();
    burrow.pool.start();
    const url = await burrow.app.listen({ host: config.host, port: config.port });
    const e2b =
      config.e2b === null ? null : await burrow.e2b.listen(config.host, config.e2b.apiPort, config.e2b.envdPort);
    return { url, e2b, burrow, close };
  } catch (error) {
    await close();
    throw error;
  }
}

/**
 * Prepare a host: migrations, the admin key, and the `base` template (built, or found in the cache).
 * @param options.onLog receives build progress lines
 * @returns where the admin key is, and the base template
 * @throws Error when the base template fails to build
 * @example
 * const { adminKeyPath } = await setup(loadConfig(process.env), { onLog: console.error });
 */
export async function setup(
  config: Config,
  options: {
    onLog?: (line: string) => void;
    signal?: AbortSignal;
    /** Also build `e2b-base`, the template E2B's `base` maps to. @default false */
    e2b?: boolean;
  } & BurrowDeps = {},
): Promise<{ adminKeyPath: string; adminKeyCreated: boolean; template: Template }> {
  const burrow = await createBurrow(config, options);
  try {
    const key = await ensureAdminKey(burrow, config.dataDir);
    if (key.secret !== null) {
      process.stdout.write(`Created the admin API key (saved to ${key.path}; shown only now):\n${key.secret}\n`);
    }
    options.onLog?.('building the base template (cached after the first time)');
    const buildOptions = {
      ...(options.onLog === undefined ? {} : { onLog: options.onLog }),
      ...(options.signal === undefined ? {} : { signal: options.signal }),
    };
    const template = await burrow.services.templates.ensureBase(buildOptions);
    if (options.e2b === true) {
      options.onLog?.('building the e2b-base template (cached after the first time)');
      await burrow.services.templates.ensureE2bBase(buildOptions);
    }
    return { adminKeyPath: key.path, adminKeyCreated: key.secret !== null, template };
  } finally {
    await burrow.close();
  }
}
