import { chmod, readFile, writeFile } from 'node:fs/promises';
import type { Server } from 'node:http';
import { join } from 'node:path';
import type { Template } from '@burrow/contract';
import { armCrashPoint, type RuntimeDriver } from '@burrow/runtime';
import { GvisorDriver, LoopVolumeHost, loadImageKey, type SandboxNetworks } from '@burrow/runtime-gvisor';
import { type Logger, pino } from 'pino';
/** Everything the server needs to know, read once from the environment by {@link loadConfig}. */
import { type Config, type ConfigOverrides, loadConfig } from './config.js';
import { lockDataDir, prepareDataDir } from './data-dir.js';
import { LazyEgressCa } from './egress/egress-ca.js';
import { installEgressCa } from './egress/sandbox-trust.js';
import { SecretCipher } from './egress/secret-cipher.js';
import { startSecretsEgress } from './egress/secrets-egress.js';
import { installHeapHeadroom } from './heap-headroom.js';
import { buildApp } from './http/app.js';
import { buildE2bServers, type E2bServers } from './http/e2b/e2b-servers.js';
import { installPreviewProxy } from './http/preview-proxy.js';
import type { ZodApp } from './http/zod-app.js';
import { ActivityTracker } from './lifecycle/activity-tracker.js';
import { ActorContext } from './lifecycle/actor-context.js';
import { hasRunningCommand } from './lifecycle/command-activity-probe.js';
import { PolicyEnforcer } from './lifecycle/policy-enforcer.js';
import { Reconciler } from './lifecycle/reconciler.js';
import { GvisorTemplateBuilder } from './node/gvisor-template-builder.js';
import { startSandboxDns } from './sandbox-dns.js';
import { AuditService } from './services/audit-service.js';
import { type BlobStore, LocalDirBlobStore } from './services/blob-store.js';
import { BucketService } from './services/bucket-service.js';
import { CommandService } from './services/command-service.js';
import { EventService } from './services/event-service.js';
import { ExecService } from './services/exec-service.js';
import { FileService } from './services/file-service.js';
import { FsHolders, releasingDriver } from './services/fs-holders.js';
import { type HostCapacity, hostCapacity } from './services/host-capacity.js';
import { HygieneService } from './services/hygiene-service.js';
import { KeyService } from './services/key-service.js';
import { Metrics, type MetricsSources } from './services/metrics.js';
import { MetricsSampler } from './services/metrics-sampler.js';
import { NetworkService } from './services/network-service.js';
import { PolicyService } from './services/policy-service.js';
import { PortService } from './services/port-service.js';
import { PreviewAccess } from './services/preview-access.js';
import { PreviewHosts } from './services/preview-host.js';
import { QuotaService } from './services/quota-service.js';
import { openS3SnapshotStore } from './services/s3-config.js';
import { SandboxService } from './services/sandbox-service.js';
import { SecretService } from './services/secret-service.js';
import type { Services } from './services/services.js';
import { SyncService } from './services/sync-service.js';
import { type TemplateBuilder, TemplateService } from './services/template-service.js';
import { TenantDefaultsService } from './services/tenant-defaults-service.js';
import { UsageService } from './services/usage-service.js';
import { VolumeService } from './services/volume-service.js';
import { WarmPool } from './services/warm-pool.js';
import { WebhookDispatcher } from './services/webhook-dispatcher.js';
import { EventStore } from './store/event-store.js';
import { PortStore } from './store/port-store.js';
import { SecretStore } from './store/secret-store.js';
import { openStore, type Store } from './store/store.js';
import { type Clock, systemClock } from './util/clock.js';
import { KeyedMutex } from './util/keyed-mutex.js';

export { type Config, type ConfigOverrides, loadConfig };

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
  const keys = new KeyService({
    keys: store.keys,
    clock,
    logger,
    sandboxExists: async (tenantId, id) => (await store.sandboxes.get(tenantId, id)) !== null,
  });
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
  const secrets = new SecretService({
    store: new SecretStore(store.db),
    cipher: await SecretCipher.load(join(config.dataDir, 'secret-key')),
    clock,
    logger,
  });
  const egressCa = new LazyEgressCa(config.dataDir);
  const volumes = new VolumeService({
    volumes: store.volumes,
    sandboxes: store.sandboxes,
    host: new LoopVolumeHost(join(config.dataDir, 'volumes')),
    mutex,
    clock,
    logger: logger.child({ component: 'volumes' }),
  });
  // Volumes are mounted on the host before any sandbox that binds one is restored or started.
  await volumes.reconcile();
  const sandboxes: SandboxService = new SandboxService({
    ...(networks === undefined
      ? {}
      : {
          secrets,
          installSecretTrust: async (id: string) => {
            await installEgressCa(driver.rootDir(id), (await egressCa.get()).certPem);
          },
        }),
    volumes,
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
  const sampler = new MetricsSampler({
    sandboxes: store.sandboxes,
    driver,
    clock,
    logger: logger.child({ component: 'metrics-sampler' }),
    intervalMs: config.metricsSampleIntervalMs,
  });
  const files = new FileService({
    sandboxes,
    driver,
    mutex,
    holders: fsHolders,
    onSwept: (sandboxId, names) =>
      logger.warn({ sandboxId, names }, 'removed temporary files of uploads a stopped server left'),
  });
  const buckets = new BucketService({ store: store.buckets, clock });
  const sync = new SyncService({
    buckets,
    files,
    stateDir: join(config.dataDir, 'sync-state'),
    clock,
    logger: logger.child({ component: 'sync' }),
  });
  const services: Services = {
    secrets,
    keys,
    templates,
    sandboxes,
    exec: new ExecService({ sandboxes, driver, mutex, clock, logger, activity }),
    commands: new CommandService({ sandboxes, driver, mutex, clock, logger }),
    files,
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
    usage: new UsageService({ events: eventStore, sandboxes: store.sandboxes, clock }),
    audit: new AuditService({ store: store.audit, clock, logger: logger.child({ component: 'audit' }) }),
    sampler,
    buckets,
    sync,
    volumes,
    driverName: driver.name,
  };
  sampler.start();
  const egress =
    networks === undefined || resolver === undefined
      ? undefined
      : await startSecretsEgress({
          networks,
          dns: resolver,
          secrets,
          ca: egressCa,
          never: config.network?.never ?? [],
          upstreamCa:
            config.network?.egressUpstreamCaPath == null
              ? undefined
              : [await readFile(config.network.egressUpstreamCaPath, 'utf8')],
          logger: logger.child({ component: 'secrets-egress' }),
        });
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
  metrics.setSources({
    ...metricsSources(store, driver),
    usageByTenant: () => services.usage?.totalsByTenant() ?? Promise.resolve(new Map()),
  });
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
  const ports = new PortService({
    ports: new PortStore(store.db),
    sandboxes,
    exec: services.exec,
    driver,
    access: await PreviewAccess.load(join(config.dataDir, 'preview-secret')),
    hosts: new PreviewHosts(config.preview?.domain ?? 'localhost'),
    serverPort: () => config.preview?.urlPort ?? listeningPort(app.server, config.port),
    mutex,
    clock,
    activity,
  });
  services.ports = ports;
  const app = await buildApp({
    services,
    logger,
    bodyLimitBytes: config.bodyLimitBytes,
    httpLimits: config.httpLimits,
    actors,
    auditCommandLines: config.audit?.commandLines ?? false,
  });
  const preview = installPreviewProxy(app.server, { ports, clock, logger: logger.child({ component: 'preview' }) });
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
      await sampler.stop();
      volumes.stopRetention();
      await pool.stop();
      await policies.stop();
      await webhooks.stop();
      await reconciler.stop();
      s3?.close();
      await events.flush();
      await e2b.close();
      await app.close();
      await services.audit?.close();
      preview.close();
      await driver.close?.();
      await egress?.close();
      await resolver?.close();
      await store.close();
    },
  };
}

/** The port `server` listens on (`fallback` before it listens). */
function listeningPort(server: Server, fallback: number): number {
  const address = server.address();
  return address !== null && typeof address === 'object' ? address.port : fallback;
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
    burrow.services.audit?.startRetention(config.audit?.retentionMs ?? null);
    burrow.webhooks.start();
    burrow.pool.start();
    burrow.services.volumes.startRetention(config.reconcileIntervalMs);
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
