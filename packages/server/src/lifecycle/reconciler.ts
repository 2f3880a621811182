import type { RuntimeDriver } from '@burrow/runtime';
import type { Logger } from 'pino';
import type { SandboxService } from '../services/sandbox-service.js';
import type { SandboxStore } from '../store/sandbox-store.js';
import type { Clock } from '../util/clock.js';
import type { KeyedMutex } from '../util/keyed-mutex.js';
import { decideSandbox, findOrphans } from './ttl-policy.js';

/** What one reconcile pass did, for logs and tests. */
export interface ReconcileReport {
  expired: string[];
  finished: string[];
  markedError: string[];
  orphansReaped: string[];
  failures: Array<{ id: string; message: string }>;
}

/** Dependencies of the {@link Reconciler}. */
export interface ReconcilerDeps {
  sandboxes: SandboxStore;
  service: SandboxService;
  driver: RuntimeDriver;
  mutex: KeyedMutex;
  clock: Clock;
  logger: Logger;
}

/**
 * Moves observed state toward desired state: deletes expired sandboxes, finishes rows a crash left `creating` or
 * `deleting`, marks running rows whose container vanished as `error`, and removes host resources no row owns.
 * Each step runs under the sandbox's lock and re-reads the row first.
 */
export class Reconciler {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<ReconcileReport> | null = null;

  constructor(private readonly deps: ReconcilerDeps) {}

  /** One pass over every row and every host resource. Concurrent calls share one pass. */
  reconcileOnce(): Promise<ReconcileReport> {
    if (this.running === null) {
      this.running = this.pass().finally(() => {
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

  private async pass(): Promise<ReconcileReport> {
    const { sandboxes, driver, mutex, clock, logger } = this.deps;
    const report: ReconcileReport = { expired: [], finished: [], markedError: [], orphansReaped: [], failures: [] };
    // Host first, rows second: a sandbox created in between has a row by the time rows are read.
    const host = await driver.listHostResources();
    const rows = await sandboxes.listAcrossTenants();
    for (const row of rows) {
      const { action } = decideSandbox(clock.nowMs(), row, { inFlight: mutex.isBusy(row.id) });
      if (action.type === 'none') continue;
      try {
        await mutex.run(row.id, async () => {
          const fresh = await sandboxes.getAcrossTenants(row.id);
          if (fresh === null) return;
          const again = decideSandbox(clock.nowMs(), fresh, { inFlight: false });
          if (again.action.type === 'expire' || again.action.type === 'finish-interrupted') {
            await this.deps.service.deleteUnderLock(fresh);
            (again.action.type === 'expire' ? report.expired : report.finished).push(fresh.id);
          } else if (again.action.type === 'observe') {
            const refreshed = await this.deps.service.refresh(fresh);
            if (refreshed.state === 'error') report.markedError.push(fresh.id);
          }
        });
      } catch (error) {
        report.failures.push({ id: row.id, message: (error as Error).message });
      }
    }
    const owned = new Set(rows.map((r) => r.id));
    for (const id of findOrphans(host.sandboxIds, owned)) {
      try {
        await mutex.run(id, async () => {
          if ((await sandboxes.getAcrossTenants(id)) !== null) return;
          await driver.delete(id);
          report.orphansReaped.push(id);
        });
      } catch (error) {
        report.failures.push({ id, message: (error as Error).message });
      }
    }
    const acted =
      report.expired.length +
      report.finished.length +
      report.markedError.length +
      report.orphansReaped.length +
      report.failures.length;
    if (acted > 0) logger.info({ report }, 'reconcile pass acted');
    return report;
  }
}
