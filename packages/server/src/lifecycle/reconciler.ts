import type { RuntimeDriver } from '@burrow/runtime';
import type { Logger } from 'pino';
import type { BlobStore } from '../services/blob-store.js';
import type { Metrics } from '../services/metrics.js';
import type { SandboxService } from '../services/sandbox-service.js';
import type { SandboxStore } from '../store/sandbox-store.js';
import type { SnapshotStore } from '../store/snapshot-store.js';
import type { Clock } from '../util/clock.js';
import type { KeyedMutex } from '../util/keyed-mutex.js';
import { type ActorContext, SYSTEM_RECONCILER } from './actor-context.js';
import { HostHygiene } from './host-hygiene.js';
import { isQuarantined } from './quarantine.js';
import { decideSandbox } from './ttl-policy.js';

/** What one reconcile pass did, for logs and tests. */
export interface ReconcileReport {
  expired: string[];
  finished: string[];
  markedError: string[];
  /** Host resources and snapshot blobs no row owns, seen for the first time (reaped after the grace period). */
  orphansFound: string[];
  orphansReaped: string[];
  /** `error`/`stopped` rows whose ended runtime still held host resources, released. */
  released: string[];
  failures: Array<{ id: string; message: string }>;
}

/** Dependencies of the {@link Reconciler}. */
export interface ReconcilerDeps {
  sandboxes: SandboxStore;
  snapshots: SnapshotStore;
  blobs: BlobStore;
  service: SandboxService;
  driver: RuntimeDriver;
  mutex: KeyedMutex;
  clock: Clock;
  logger: Logger;
  metrics?: Metrics | undefined;
  /** Names the reconciler (`system:reconciler`) as the actor of the events its passes record (absent: `system`). */
  actors?: ActorContext | undefined;
  /** Grace before host resources no row owns are reaped, ms. @default 60_000 */
  orphanGraceMs?: number | undefined;
}

/**
 * Moves observed state toward desired state: deletes expired sandboxes, finishes rows a crash left `creating` or
 * `deleting`, marks running rows whose container vanished as `error`, and removes host resources no row owns.
 * Each step runs under the sandbox's lock and re-reads the row first.
 */
export class Reconciler {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<ReconcileReport> | null = null;

  /** Orphans, vanished resources, deletion backoff. */
  private readonly hygiene: HostHygiene;

  constructor(private readonly deps: ReconcilerDeps) {
    this.hygiene = new HostHygiene(deps);
  }

  /** One pass over every row and every host resource. Concurrent calls share one pass. */
  reconcileOnce(): Promise<ReconcileReport> {
    if (this.running === null) {
      const actors = this.deps.actors;
      const pass = actors === undefined ? this.pass() : actors.run({ actor: SYSTEM_RECONCILER }, () => this.pass());
      this.running = pass.finally(() => {
        this.running = null;
      });
    }
    return this.running;
  }

  /**
   * Run a pass now, then every `intervalMs` until {@link stop}.
   * @param intervalMs time between passes, ms
   */
  start(intervalMs: number): void {
    if (this.timer !== null) return;
    const tick = () => {
      this.reconcileOnce()
        .catch((error: unknown) => this.deps.logger.error({ err: error }, 'reconcile pass failed'))
        .finally(() => {
          if (this.timer !== null) this.timer = setTimeout(tick, intervalMs);
        });
    };
    this.timer = setTimeout(tick, 0);
  }

  /** Stop the loop and wait for a pass in progress. */
  async stop(): Promise<void> {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    await this.running?.catch(() => undefined);
  }

  /** Whether the first pass (the one after a start, which settles interrupted host steps) has run. */
  private settled = false;

  /**
   * After a start: let the driver finish or undo host steps a crash interrupted (a fork that left its parent held
   * still), and drop snapshots whose bytes never became durable.
   */
  private async settleAfterStart(report: ReconcileReport): Promise<void> {
    const { sandboxes, driver, mutex, snapshots, blobs } = this.deps;
    for (const row of await sandboxes.listAcrossTenants()) {
      if (mutex.isBusy(row.id)) continue;
      await mutex
        .run(row.id, () => driver.settle(row.id))
        .catch((error: unknown) => report.failures.push({ id: row.id, message: (error as Error).message }));
    }
    for (const snapshot of await snapshots.listAcrossTenants()) {
      if (snapshot.state !== 'creating' || mutex.isBusy(snapshot.sandboxId)) continue;
      await blobs.delete(snapshot.id).catch(() => undefined);
      await snapshots.remove(snapshot.id);
      report.finished.push(snapshot.id);
    }
  }

  private async pass(): Promise<ReconcileReport> {
    const { sandboxes, driver, mutex, clock, logger } = this.deps;
    const report: ReconcileReport = {
      expired: [],
      finished: [],
      markedError: [],
      orphansFound: [],
      orphansReaped: [],
      released: [],
      failures: [],
    };
    if (!this.settled) {
      this.settled = true;
      await this.settleAfterStart(report);
    }
    // Host first, rows second: a sandbox created in between has a row by the time rows are read.
    const host = await driver.listHostResources();
    const rows = await sandboxes.listAcrossTenants();
    for (const row of rows) {
      const { action } = decideSandbox(clock.nowMs(), row, { inFlight: mutex.isBusy(row.id) });
      if (action.type === 'none') continue;
      // Policies never touch a quarantined sandbox; a failed deletion waits out its backoff.
      if (action.type === 'expire' && isQuarantined(row)) continue;
      const deletes = action.type === 'expire' || action.type === 'finish-interrupted';
      if (deletes && !this.hygiene.mayAttempt(row.id)) continue;
      try {
        await mutex.run(row.id, async () => {
          const fresh = await sandboxes.getAcrossTenants(row.id);
          if (fresh === null) return;
          const again = decideSandbox(clock.nowMs(), fresh, { inFlight: false });
          if (again.action.type === 'expire' && isQuarantined(fresh)) return;
          if (again.action.type === 'expire' || again.action.type === 'finish-interrupted') {
            await this.deps.service.deleteUnderLock(fresh);
            this.hygiene.succeeded(fresh.id);
            (again.action.type === 'expire' ? report.expired : report.finished).push(fresh.id);
          } else if (again.action.type === 'finish-transition') {
            await this.deps.service.persistence.finishInterrupted(fresh);
            report.finished.push(fresh.id);
          } else if (again.action.type === 'observe') {
            const refreshed = await this.deps.service.refresh(fresh);
            if (refreshed.state === 'error') report.markedError.push(fresh.id);
          }
        });
      } catch (error) {
        if (deletes) this.hygiene.failed(row.id);
        report.failures.push({ id: row.id, message: (error as Error).message });
      }
    }
    await this.hygiene.reapOrphans(host, rows, report);
    await this.hygiene.markVanished(host, rows, report);
    await this.hygiene.releaseEnded(host, rows, report);
    await this.hygiene.reapBlobs(report);
    // Host leftovers of no sandbox (gVisor: empty cgroup parents of instances whose data dir is gone): logged only,
    // they may belong to other instances on this host, so they stay out of this instance's report.
    const leftovers = await driver.reapHostLeftovers?.().catch((error: unknown) => {
      this.deps.logger.warn({ err: error }, 'reaping host leftovers failed');
      return [];
    });
    if (leftovers !== undefined && leftovers.length > 0) this.deps.logger.info({ leftovers }, 'host leftovers removed');
    const acted =
      report.expired.length +
      report.finished.length +
      report.markedError.length +
      report.orphansFound.length +
      report.orphansReaped.length +
      report.released.length +
      report.failures.length;
    if (acted > 0) logger.info({ report }, 'reconcile pass acted');
    return report;
  }
}
