import type { Resources } from '@burrow/contract';
import { DEFAULT_RESOURCES } from '@burrow/contract';
import type { RuntimeDriver } from '@burrow/runtime';
import type { Logger } from 'pino';
import { expiresAtFor } from '../lifecycle/ttl-policy.js';
import { POOL_TENANT, type PoolSpec, type PoolStore } from '../store/pool-store.js';
import type { SandboxRecord, SandboxStore } from '../store/sandbox-store.js';
import { PUBLIC_TENANT } from '../store/template-store.js';
import { type Clock, isoNow } from '../util/clock.js';
import { newId } from '../util/ids.js';
import type { KeyedMutex } from '../util/keyed-mutex.js';
import type { TemplateService } from './template-service.js';

/** One entry of the warm pool: keep `count` ready sandboxes of a public template with these resources. */
export interface WarmPoolTarget {
  /** Name of a public template (for example `base`). */
  template: string;
  /** Ready sandboxes to keep. 0 drains this spec. */
  count: number;
  resources: Resources;
}

/**
 * Parse `BURROW_WARM_POOL`: comma-separated `TEMPLATE[@CPU/MEMORY_MIB/DISK_MIB]:COUNT` entries, for example
 * `base:4` (4 sandboxes of `base` with the default resources) or `base:2,base@2/2048/10240:1`. `''` or `none`: no
 * pool.
 * @returns the targets (entries with the same template and resources are summed)
 * @throws RangeError naming the entry that does not parse
 * @example
 * parseWarmPool('base:4') // [{ template: 'base', count: 4, resources: { cpuCount: 1, memoryMiB: 512, diskMiB: 2048 } }]
 */
export function parseWarmPool(value: string): WarmPoolTarget[] {
  const trimmed = value.trim();
  if (trimmed === '' || trimmed === 'none') return [];
  const targets: WarmPoolTarget[] = [];
  for (const entry of trimmed.split(',')) {
    const match = /^([a-z0-9][a-z0-9-]{0,62})(?:@([0-9.]+)\/([0-9]+)\/([0-9]+))?:([0-9]+)$/.exec(entry.trim());
    if (match === null) {
      throw new RangeError(
        `BURROW_WARM_POOL entry "${entry}" is not TEMPLATE[@CPU/MEMORY_MIB/DISK_MIB]:COUNT (for example base:4)`,
      );
    }
    const [, template = '', cpu, memory, disk, count = '0'] = match;
    const resources: Resources =
      cpu === undefined
        ? { ...DEFAULT_RESOURCES }
        : { cpuCount: Number(cpu), memoryMiB: Number(memory), diskMiB: Number(disk) };
    if (!(resources.cpuCount > 0) || resources.memoryMiB <= 0 || resources.diskMiB <= 0) {
      throw new RangeError(`BURROW_WARM_POOL entry "${entry}" has a zero resource`);
    }
    const same = targets.find((t) => t.template === template && sameResources(t.resources, resources));
    if (same) same.count += Number(count);
    else targets.push({ template, count: Number(count), resources });
  }
  return targets;
}

function sameResources(a: Resources, b: Resources): boolean {
  return a.cpuCount === b.cpuCount && a.memoryMiB === b.memoryMiB && a.diskMiB === b.diskMiB;
}

/** Per-sandbox data of a create request, applied to a pool sandbox when it is claimed. */
export interface WarmPoolClaimInput {
  tenantId: string;
  /** Template name as the caller wrote it. */
  template: string;
  templateId: string;
  resources: Resources;
  env: Record<string, string>;
  labels: Record<string, string>;
  cwd: string;
  timeoutMs: number | null;
  autoResume: boolean;
}

/** What one {@link WarmPool.fillOnce} did, for logs and tests. */
export interface WarmPoolReport {
  created: string[];
  deleted: string[];
  failures: Array<{ id: string; message: string }>;
  /** True when it stopped early because a tenant's create, resume or pause was in progress. */
  yielded: boolean;
}

/** Dependencies of the {@link WarmPool}. */
export interface WarmPoolDeps {
  pool: PoolStore;
  sandboxes: SandboxStore;
  templates: TemplateService;
  driver: RuntimeDriver;
  mutex: KeyedMutex;
  clock: Clock;
  logger: Logger;
  /** Delete a sandbox row and everything of it on the host; call under the id's lock (SandboxService.deleteUnderLock). */
  deleteUnderLock(record: SandboxRecord): Promise<void>;
  /**
   * Wait after a claim before refilling, ms: a refill boots a sandbox (runsc create/start, ~0.3 s of CPU), and on a
   * small host that would slow the claimer's first commands. @default 1000
   */
  refillDelayMs?: number | undefined;
}

/** States of a tenant's sandbox that mean real work the pool must not slow down. */
const BUSY_STATES = new Set(['creating', 'resuming', 'pausing', 'stopping']);

/**
 * The warm pool: ready sandboxes of public templates, each a full cold create of its own (own disk image, own
 * gVisor kernel boot, own id and hostname), held under the `_pool` tenant until a create with the same template and
 * resources claims one with an atomic conditional update. A background loop refills one sandbox at a time, yields
 * while a tenant's create/resume/pause runs, re-adopts pool sandboxes a previous process left (deleting those whose
 * container is gone) and deletes what is above target.
 */
export class WarmPool {
  private targets: WarmPoolTarget[];
  private timer: NodeJS.Timeout | null = null;
  /** When {@link timer} fires, epoch ms. */
  private dueAtMs = 0;
  private filling: Promise<WarmPoolReport> | null = null;
  private stopped = true;
  /** Set by {@link stop}: a pass in progress creates nothing more. */
  private closed = false;
  private intervalMs = 5_000;
  /** Whether a pass has checked on the host the pool sandboxes found at start (later, the reconciler observes them). */
  private adopted = false;

  constructor(
    private readonly deps: WarmPoolDeps,
    targets: readonly WarmPoolTarget[],
  ) {
    this.targets = targets.map((t) => ({ ...t, resources: { ...t.resources } }));
  }

  /** Current targets (copies). */
  getTargets(): WarmPoolTarget[] {
    return this.targets.map((t) => ({ ...t, resources: { ...t.resources } }));
  }

  /** Replace the targets; the next fill creates or deletes toward them. */
  setTargets(targets: readonly WarmPoolTarget[]): void {
    this.targets = targets.map((t) => ({ ...t, resources: { ...t.resources } }));
    this.kick();
  }

  /**
   * Take a ready pool sandbox for `input`, or null when none matches (the caller then creates cold). Only public
   * templates are pooled: `input.templateId` must be the content address the pool sandboxes were built from.
   */
  async claim(input: WarmPoolClaimInput): Promise<SandboxRecord | null> {
    if (!this.targets.some((t) => t.count > 0 && sameResources(t.resources, input.resources))) return null;
    const spec: PoolSpec = { templateId: input.templateId, ...input.resources };
    const claimed = await this.deps.pool.claim(spec, {
      tenantId: input.tenantId,
      template: input.template,
      env: input.env,
      labels: input.labels,
      cwd: input.cwd,
      timeoutMs: input.timeoutMs,
      expiresAt: expiresAtFor(this.deps.clock.nowMs(), input.timeoutMs),
      autoResume: input.autoResume,
      at: isoNow(this.deps.clock),
    });
    if (claimed !== null) {
      this.deps.logger.info({ sandboxId: claimed.id, tenantId: input.tenantId }, 'warm pool sandbox claimed');
    }
    if (!this.stopped) this.schedule(this.deps.refillDelayMs ?? 1000);
    return claimed;
  }

  /**
   * Fill now, then every `intervalMs` (and soon after each claim) until {@link stop}.
   * @param intervalMs time between fills, ms @default 5_000
   */
  start(intervalMs = 5_000): void {
    this.intervalMs = intervalMs;
    if (!this.stopped) return;
    this.stopped = false;
    this.closed = false;
    this.schedule(0);
  }

  /** Stop the loop and wait for a fill in progress. Pool sandboxes stay: the next start re-adopts them. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    await this.filling?.catch(() => undefined);
  }

  /** Delete every pool sandbox (targets become empty). For shutdown of benches and tests. */
  async drain(): Promise<WarmPoolReport> {
    this.targets = [];
    await this.filling?.catch(() => undefined);
    return this.fillOnce();
  }

  /** True when no fill is running or due within the next moment (for benches: measure on a quiet host). */
  isIdle(): boolean {
    return this.filling === null;
  }

  /** Ids of every pool sandbox, any state. */
  async memberIds(): Promise<string[]> {
    return (await this.deps.pool.members()).map((m) => m.id);
  }

  /** Ready pool sandboxes per target, in target order. */
  async readyCounts(): Promise<number[]> {
    const members = await this.deps.pool.members();
    const ids = await this.templateIds();
    return this.targets.map(
      (t, i) =>
        members.filter(
          (m) => m.state === 'running' && m.templateId === ids[i] && sameResources(resourcesOf(m), t.resources),
        ).length,
    );
  }

  /**
   * One pass: delete pool sandboxes that are broken, vanished or above target, then create the missing ones one at
   * a time. Concurrent calls share one pass.
   */
  fillOnce(): Promise<WarmPoolReport> {
    if (this.filling === null) {
      this.filling = this.pass().finally(() => {
        this.filling = null;
      });
    }
    return this.filling;
  }

  private kick(): void {
    if (!this.stopped) this.schedule(0);
  }

  /** Run a fill in `delayMs`, unless one is already due sooner (a stream of claims never postpones the refill). */
  private schedule(delayMs: number): void {
    const dueAtMs = Date.now() + delayMs;
    if (this.timer !== null) {
      if (this.dueAtMs <= dueAtMs) return;
      clearTimeout(this.timer);
    }
    this.dueAtMs = dueAtMs;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.fillOnce()
        .catch((error: unknown) => {
          this.deps.logger.error({ err: error }, 'warm pool fill failed');
          return { yielded: false, created: [], deleted: [], failures: [] } satisfies WarmPoolReport;
        })
        .then((report) => {
          // A pass that yielded comes back soon; a complete one waits for the interval or the next claim.
          if (!this.stopped && this.timer === null) this.schedule(report.yielded ? 250 : this.intervalMs);
        });
    }, delayMs);
  }

  /** Content address of each target's public template (null: not ready on this node). */
  private async templateIds(): Promise<Array<string | null>> {
    return Promise.all(
      this.targets.map((t) =>
        this.deps.templates.resolveReady(PUBLIC_TENANT, t.template).then(
          (r) => r.record.id,
          () => null,
        ),
      ),
    );
  }

  private async tenantBusy(): Promise<boolean> {
    const rows = await this.deps.sandboxes.listAcrossTenants();
    return rows.some((r) => r.tenantId !== POOL_TENANT && BUSY_STATES.has(r.state) && this.deps.mutex.isBusy(r.id));
  }

  private async pass(): Promise<WarmPoolReport> {
    const report: WarmPoolReport = { created: [], deleted: [], failures: [], yielded: false };
    const ids = await this.templateIds();
    const members = await this.deps.pool.members();
    const kept = new Map<number, number>();
    const observe = !this.adopted;
    this.adopted = true;
    for (const member of members) {
      if (this.deps.mutex.isBusy(member.id)) continue;
      const index = this.targets.findIndex(
        (t, i) => member.templateId === ids[i] && sameResources(resourcesOf(member), t.resources),
      );
      const have = kept.get(index) ?? 0;
      let keep = index >= 0 && member.state === 'running' && have < (this.targets[index]?.count ?? 0);
      if (keep && observe) {
        const observed = await this.deps.driver.observe(member.id).catch(() => null);
        keep = observed?.status === 'running';
      }
      if (keep) {
        kept.set(index, have + 1);
        continue;
      }
      await this.remove(member, report);
    }
    for (const [index, target] of this.targets.entries()) {
      const templateId = ids[index];
      if (templateId === null || templateId === undefined) continue;
      for (let have = kept.get(index) ?? 0; have < target.count && !this.closed; have++) {
        if (await this.tenantBusy()) {
          report.yielded = true;
          return report;
        }
        // A failed create ends the pass: the next one retries after the interval instead of hammering the host.
        if (!(await this.createOne(target, templateId, report))) return report;
      }
    }
    if (report.created.length + report.deleted.length + report.failures.length > 0) {
      this.deps.logger.info({ report }, 'warm pool filled');
    }
    return report;
  }

  private async remove(member: SandboxRecord, report: WarmPoolReport): Promise<void> {
    try {
      await this.deps.mutex.run(member.id, async () => {
        const fresh = await this.deps.sandboxes.get(POOL_TENANT, member.id);
        if (fresh === null) return;
        await this.deps.deleteUnderLock(fresh);
        report.deleted.push(member.id);
      });
    } catch (error) {
      report.failures.push({ id: member.id, message: (error as Error).message });
    }
  }

  private async createOne(target: WarmPoolTarget, templateId: string, report: WarmPoolReport): Promise<boolean> {
    const id = newId('sbx');
    try {
      await this.deps.mutex.run(id, async () => {
        const ref = await this.deps.templates.refById(templateId, target.template);
        const now = isoNow(this.deps.clock);
        const record: SandboxRecord = {
          id,
          tenantId: POOL_TENANT,
          template: target.template,
          templateId,
          state: 'creating',
          conditions: [],
          env: {},
          labels: {},
          cwd: '/root',
          hostname: id.replace('_', '-'),
          ...target.resources,
          timeoutMs: null,
          expiresAt: null,
          createdAt: now,
          updatedAt: now,
          version: 1,
          desiredState: 'running',
          autoResume: true,
          parentId: null,
          snapshotId: null,
        };
        await this.deps.sandboxes.insert(record);
        try {
          await this.deps.driver.create({
            sandboxId: id,
            template: ref,
            resources: target.resources,
            hostname: record.hostname,
          });
          // Hand out only sandboxes whose exec fast path is up (a claim's first exec then never falls back).
          if ((await this.deps.driver.execAgentReady?.(id)) === false) {
            this.deps.logger.warn({ sandboxId: id }, 'warm pool sandbox without a connected exec agent');
          }
          const running = await this.deps.sandboxes.update(
            POOL_TENANT,
            id,
            1,
            { state: 'running' },
            isoNow(this.deps.clock),
          );
          if (running === null) throw new Error('the pool row changed during create');
        } catch (error) {
          await this.deps.driver.delete(id).catch(() => undefined);
          await this.deps.sandboxes.remove(POOL_TENANT, id);
          throw error;
        }
      });
      report.created.push(id);
      return true;
    } catch (error) {
      report.failures.push({ id, message: (error as Error).message });
      this.deps.logger.warn({ err: error, sandboxId: id }, 'warm pool create failed');
      return false;
    }
  }
}

function resourcesOf(r: SandboxRecord): Resources {
  return { cpuCount: r.cpuCount, memoryMiB: r.memoryMiB, diskMiB: r.diskMiB };
}
