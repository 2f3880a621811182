import type { MetricSample, SandboxMetrics } from '@burrow/contract';
import type { RuntimeDriver } from '@burrow/runtime';
import type { Logger } from 'pino';
import type { SandboxStore } from '../store/sandbox-store.js';
import type { Clock } from '../util/clock.js';

/** Options of {@link MetricsSampler}. */
export interface MetricsSamplerOptions {
  sandboxes: Pick<SandboxStore, 'listAcrossTenants'>;
  driver: Pick<RuntimeDriver, 'resourceUsage' | 'diskUsageBytes'>;
  clock: Clock;
  logger: Logger;
  /** Milliseconds between samples. @default 5_000 (5 seconds) */
  intervalMs?: number;
  /** Span of samples kept per sandbox, milliseconds. @default 1_800_000 (30 minutes) */
  windowMs?: number;
  /** Disk use is measured on every n-th sample only (it walks the sandbox's files on the host). @default 6 */
  diskEverySamples?: number;
}

interface Series {
  samples: MetricSample[];
  lastCpuNs: number | null;
  lastAtMs: number;
  taken: number;
}

/**
 * Samples every running sandbox's CPU, memory (its cgroup counters) and disk on a timer, and keeps each sandbox's
 * samples for a bounded window in memory (lost at restart; the console graphs the recent past, not history).
 * A sandbox that stops running keeps its samples until the window passes them.
 */
export class MetricsSampler {
  readonly intervalMs: number;
  readonly windowMs: number;
  private readonly diskEvery: number;
  private readonly series = new Map<string, Series>();
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;

  constructor(private readonly options: MetricsSamplerOptions) {
    this.intervalMs = options.intervalMs ?? 5_000;
    this.windowMs = options.windowMs ?? 1_800_000;
    this.diskEvery = Math.max(1, options.diskEverySamples ?? 6);
  }

  /** Start sampling (a no-op when the driver reads no cgroup counters). */
  start(): void {
    if (this.timer !== null || this.options.driver.resourceUsage === undefined) return;
    this.timer = setInterval(() => {
      if (this.running === null) this.running = this.sampleOnce().finally(() => (this.running = null));
    }, this.intervalMs);
    this.timer.unref();
  }

  /** Stop sampling and wait for a sample under way. */
  async stop(): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    await this.running;
  }

  /** The samples kept for `sandboxId`, oldest first (empty when none). */
  samplesOf(sandboxId: string): MetricSample[] {
    return [...(this.series.get(sandboxId)?.samples ?? [])];
  }

  /** Shape of the answer of `GET /v1/sandboxes/{id}/metrics`, given the sandbox's limits. */
  metricsOf(sandboxId: string, limits: SandboxMetrics['limits']): SandboxMetrics {
    return { intervalMs: this.intervalMs, windowMs: this.windowMs, limits, samples: this.samplesOf(sandboxId) };
  }

  /** Take one sample of every running sandbox and drop samples older than the window. */
  async sampleOnce(): Promise<void> {
    const { driver, clock } = this.options;
    const readUsage = driver.resourceUsage?.bind(driver);
    if (readUsage === undefined) return;
    const rows = await this.options.sandboxes.listAcrossTenants();
    const live = new Set<string>();
    for (const row of rows) {
      live.add(row.id);
      if (row.state !== 'running') continue;
      try {
        const usage = await readUsage(row.id);
        if (usage === null) continue;
        const nowMs = clock.nowMs();
        const series = this.series.get(row.id) ?? { samples: [], lastCpuNs: null, lastAtMs: nowMs, taken: 0 };
        const elapsedMs = nowMs - series.lastAtMs;
        const cpuPercent =
          series.lastCpuNs === null || elapsedMs <= 0 || usage.cpuNs < series.lastCpuNs
            ? null
            : Math.round(((usage.cpuNs - series.lastCpuNs) / 1e6 / elapsedMs) * 1000) / 10;
        const diskBytes =
          series.taken % this.diskEvery === 0 && driver.diskUsageBytes !== undefined
            ? await driver.diskUsageBytes(row.id)
            : null;
        series.samples.push({
          at: new Date(nowMs).toISOString(),
          cpuPercent,
          memoryBytes: usage.memoryBytes,
          diskBytes,
        });
        series.lastCpuNs = usage.cpuNs;
        series.lastAtMs = nowMs;
        series.taken += 1;
        this.series.set(row.id, series);
      } catch (error) {
        this.options.logger.debug({ err: error, sandboxId: row.id }, 'sampling a sandbox failed');
      }
    }
    const oldestMs = clock.nowMs() - this.windowMs;
    for (const [id, series] of this.series) {
      while (series.samples.length > 0 && Date.parse(series.samples[0]?.at ?? '') < oldestMs) series.samples.shift();
      if (!live.has(id) || series.samples.length === 0) this.series.delete(id);
    }
  }
}
