import { SandboxStateSchema } from '@burrow/contract';
import type { HostResourceKind } from '@burrow/runtime';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { UsageTotals } from './usage-meter.js';

/** Operations whose latency {@link Metrics} records, in seconds. */
export type TimedOperation = 'create' | 'pause' | 'resume' | 'fork' | 'delete' | 'reset' | 'stop' | 'start';

/** Kinds of leaked resource counted: the driver's host kinds plus snapshot blobs no row owns. */
export type LeakKind = HostResourceKind | 'snapshot_blob';

/** Values read at scrape time. */
export interface MetricsSources {
  /** Sandbox rows per state, every tenant. */
  sandboxesByState(): Promise<Map<string, number>>;
  /** Quarantined sandboxes, every tenant. */
  quarantinedCount(): Promise<number>;
  /** Host disk bytes per tenant (sandbox disks and pause images, plus snapshots). */
  diskBytesByTenant(): Promise<Map<string, number>>;
  /** Bytes each sandbox with a network on the host sent and received (its router's counters). */
  networkBytes?(): Promise<Array<{ sandboxId: string; tenant: string; egressBytes: number; ingressBytes: number }>>;
  /** Usage per tenant since the first event (services/usage-meter.ts). */
  usageByTenant?(): Promise<Map<string, UsageTotals>>;
}

/** The usage counters: metric name → the totals field it exports. */
const USAGE_COUNTERS: ReadonlyArray<[string, keyof UsageTotals, string]> = [
  ['burrow_usage_vcpu_seconds_total', 'vcpuSeconds', 'Running seconds × vCPUs, per tenant'],
  ['burrow_usage_memory_gib_seconds_total', 'memoryGiBSeconds', 'Running seconds × GiB of memory, per tenant'],
  ['burrow_usage_disk_gib_seconds_total', 'diskGiBSeconds', 'Paused and stopped seconds × GiB of disk, per tenant'],
  ['burrow_usage_snapshot_gib_seconds_total', 'snapshotGiBSeconds', 'Seconds × GiB of snapshots kept, per tenant'],
];

/** Most sandboxes waiting for their first command that are tracked; older ones are dropped. */
const MAX_PENDING_FIRST_COMMANDS = 10_000;

const LATENCY_BUCKETS_S = [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120];

/**
 * The server's Prometheus metrics, on a registry of their own (no global state: two servers in one process keep
 * separate numbers). Built in main.ts and passed to the services that record into it.
 * @example
 * const metrics = new Metrics(); metrics.observeOperation('pause', 1.2); const text = await metrics.render();
 */
export class Metrics {
  readonly registry = new Registry();
  private sources: MetricsSources | null = null;
  /** One read of the usage per scrape, shared by the usage counters. */
  private usageRead: { atMs: number; usage: Promise<Map<string, UsageTotals>> } | null = null;
  /** Sandbox id → epoch ms its create was requested, until its first command finishes. */
  private readonly pendingFirstCommand = new Map<string, number>();
  private readonly operationSeconds: Histogram<'operation'>;
  private readonly firstCommandSeconds: Histogram;
  private readonly creates: Counter<'result'>;
  private readonly cleanupLagSeconds: Histogram;
  private readonly leaksFound: Counter<'kind'>;
  private readonly leaksReaped: Counter<'kind'>;

  /** @param options.processMetrics also export Node process metrics (`process_*`, `nodejs_*`). @default true */
  constructor(options: { processMetrics?: boolean } = {}) {
    const registers = [this.registry];
    if (options.processMetrics !== false) collectDefaultMetrics({ register: this.registry });
    const self = this;
    new Gauge({
      name: 'burrow_sandboxes',
      help: 'Sandboxes by state (rows in the store)',
      labelNames: ['state'],
      registers,
      async collect() {
        const counts = (await self.sources?.sandboxesByState()) ?? new Map<string, number>();
        this.reset();
        for (const state of SandboxStateSchema.options) this.set({ state }, counts.get(state) ?? 0);
      },
    });
    new Gauge({
      name: 'burrow_sandbox_network_bytes',
      help: 'Bytes a sandbox sent (direction=egress) and received (direction=ingress) over its network',
      labelNames: ['sandbox', 'tenant', 'direction'],
      registers,
      async collect() {
        const rows = (await self.sources?.networkBytes?.()) ?? [];
        this.reset();
        for (const row of rows) {
          this.set({ sandbox: row.sandboxId, tenant: row.tenant, direction: 'egress' }, row.egressBytes);
          this.set({ sandbox: row.sandboxId, tenant: row.tenant, direction: 'ingress' }, row.ingressBytes);
        }
      },
    });
    new Gauge({
      name: 'burrow_sandboxes_quarantined',
      help: 'Sandboxes set aside in quarantine',
      registers,
      async collect() {
        this.set((await self.sources?.quarantinedCount()) ?? 0);
      },
    });
    new Gauge({
      name: 'burrow_disk_bytes',
      help: 'Host disk bytes per tenant: sandbox disks and pause images (allocated) plus snapshots',
      labelNames: ['tenant'],
      registers,
      async collect() {
        const bytes = (await self.sources?.diskBytesByTenant()) ?? new Map<string, number>();
        this.reset();
        for (const [tenant, value] of bytes) this.set({ tenant }, value);
      },
    });
    for (const [name, field, help] of USAGE_COUNTERS) {
      new Counter({
        name,
        help,
        labelNames: ['tenant'],
        registers,
        async collect() {
          const usage = await self.usageOnce();
          this.reset();
          for (const [tenant, totals] of usage) this.inc({ tenant }, totals[field]);
        },
      });
    }
    this.operationSeconds = new Histogram({
      name: 'burrow_operation_duration_seconds',
      help: 'Latency of sandbox operations that succeeded, seconds',
      labelNames: ['operation'],
      buckets: LATENCY_BUCKETS_S,
      registers,
    });
    this.firstCommandSeconds = new Histogram({
      name: 'burrow_time_to_first_command_seconds',
      help: 'Create requested → first buffered command finished, seconds',
      buckets: LATENCY_BUCKETS_S,
      registers,
    });
    this.creates = new Counter({
      name: 'burrow_sandbox_creates_total',
      help: 'Sandbox creates by result (success ratio = success / all)',
      labelNames: ['result'],
      registers,
    });
    this.cleanupLagSeconds = new Histogram({
      name: 'burrow_cleanup_lag_seconds',
      help: 'Delete requested → nothing of the sandbox verified left on the host, seconds',
      buckets: LATENCY_BUCKETS_S,
      registers,
    });
    this.leaksFound = new Counter({
      name: 'burrow_leaked_resources_found_total',
      help: 'Host resources found that no row owns, by kind',
      labelNames: ['kind'],
      registers,
    });
    this.leaksReaped = new Counter({
      name: 'burrow_leaked_resources_reaped_total',
      help: 'Host resources no row owned that were removed after the grace period, by kind',
      labelNames: ['kind'],
      registers,
    });
    for (const result of ['success', 'failure']) this.creates.inc({ result }, 0);
  }

  /** The usage per tenant, read once for all the usage counters of a scrape (reused for 1 s). */
  private usageOnce(): Promise<Map<string, UsageTotals>> {
    const nowMs = Date.now();
    if (this.usageRead === null || nowMs - this.usageRead.atMs > 1000) {
      const read = this.sources?.usageByTenant?.() ?? Promise.resolve(new Map<string, UsageTotals>());
      this.usageRead = { atMs: nowMs, usage: read };
    }
    return this.usageRead.usage;
  }

  /** Where scrape-time values come from (set once the store is open). */
  setSources(sources: MetricsSources): void {
    this.sources = sources;
  }

  /** Record the latency of a successful operation. @param durationMs milliseconds */
  observeOperation(operation: TimedOperation, durationMs: number): void {
    this.operationSeconds.observe({ operation }, durationMs / 1000);
  }

  /**
   * Record the end of a create.
   * @param requestedMs epoch ms the create was requested (start of time to first command)
   * @param nowMs epoch ms now
   */
  createFinished(sandboxId: string, ok: boolean, requestedMs: number, nowMs: number): void {
    this.creates.inc({ result: ok ? 'success' : 'failure' });
    if (!ok) return;
    this.observeOperation('create', nowMs - requestedMs);
    if (this.pendingFirstCommand.size >= MAX_PENDING_FIRST_COMMANDS) {
      const oldest = this.pendingFirstCommand.keys().next().value;
      if (oldest !== undefined) this.pendingFirstCommand.delete(oldest);
    }
    this.pendingFirstCommand.set(sandboxId, requestedMs);
  }

  /** A command finished in `sandboxId`: the first one after its create sets time to first command. */
  commandFinished(sandboxId: string, nowMs: number): void {
    const requested = this.pendingFirstCommand.get(sandboxId);
    if (requested === undefined) return;
    this.pendingFirstCommand.delete(sandboxId);
    this.firstCommandSeconds.observe((nowMs - requested) / 1000);
  }

  /**
   * A deletion was verified complete.
   * @param requestedMs epoch ms the delete was requested (the row went `deleting`)
   */
  deleteVerified(sandboxId: string, requestedMs: number, nowMs: number): void {
    this.pendingFirstCommand.delete(sandboxId);
    this.cleanupLagSeconds.observe(Math.max(0, nowMs - requestedMs) / 1000);
  }

  /** Count leaked resources found (`found`) or removed (`reaped`), one per kind in `kinds`. */
  leak(event: 'found' | 'reaped', kinds: readonly LeakKind[]): void {
    for (const kind of kinds) (event === 'found' ? this.leaksFound : this.leaksReaped).inc({ kind });
  }

  /** The Prometheus text exposition of every metric. */
  async render(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
