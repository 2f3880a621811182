import type { HostResourceKind, HostResources, RuntimeDriver } from '@burrow/runtime';
import type { Logger } from 'pino';
import type { BlobStore } from '../services/blob-store.js';
import type { Metrics } from '../services/metrics.js';
import { type SandboxRecord, type SandboxStore, withConditions } from '../store/sandbox-store.js';
import type { SnapshotStore } from '../store/snapshot-store.js';
import { type Clock, isoNow } from '../util/clock.js';
import type { KeyedMutex } from '../util/keyed-mutex.js';
import { orphansDue, retryDelayMs } from './orphan-policy.js';

/** Default grace before host resources no row owns are reaped, ms (60 s). */
export const DEFAULT_ORPHAN_GRACE_MS = 60_000;

/** What hygiene did in one pass (merged into the reconciler's report). */
export interface HygieneReport {
  /** Unowned ids (sandbox ids, snapshot blob keys) seen for the first time. */
  orphansFound: string[];
  /** Unowned ids removed after their grace period. */
  orphansReaped: string[];
  /** Rows whose host resources vanished, now `error`. */
  markedError: string[];
  /** `error` or `stopped` rows whose ended runtime still held host resources, now released (disk kept). */
  released?: string[];
  failures: Array<{ id: string; message: string }>;
}

/** Dependencies of {@link HostHygiene}. */
export interface HostHygieneDeps {
  sandboxes: SandboxStore;
  snapshots: SnapshotStore;
  blobs: BlobStore;
  driver: RuntimeDriver;
  mutex: KeyedMutex;
  clock: Clock;
  logger: Logger;
  metrics?: Metrics | undefined;
  /** Grace before an unowned host resource is reaped, ms. @default 60_000 */
  orphanGraceMs?: number | undefined;
}

/**
 * Host hygiene for the reconciler: reaps host resources and snapshot blobs no row owns (only after they were seen
 * unowned for the grace period, never while an operation holds the id's lock, re-checked under that lock), marks
 * paused and stopped rows whose resources vanished as `error`, and paces retried deletions with backoff.
 *
 * Why nothing in flight is reaped: every operation that makes host resources for an id (create, fork, reset, a
 * restore from a snapshot) holds the id's lock from before its row is written until after; rows are removed only
 * after the driver verified the deletion. A resource without a row is therefore either left by a crash or belongs
 * to an operation holding the lock; the lock check restarts the grace, and the reap re-reads the row under the lock.
 */
export class HostHygiene {
  private firstSeenMs = new Map<string, number>();
  private blobFirstSeenMs = new Map<string, number>();
  private readonly failures = new Map<string, { count: number; nextAtMs: number }>();
  private readonly graceMs: number;

  constructor(private readonly deps: HostHygieneDeps) {
    this.graceMs = deps.orphanGraceMs ?? DEFAULT_ORPHAN_GRACE_MS;
  }

  /** Whether a deletion of `id` may be attempted now (not waiting out a backoff after failures). */
  mayAttempt(id: string): boolean {
    const failure = this.failures.get(id);
    return failure === undefined || this.deps.clock.nowMs() >= failure.nextAtMs;
  }

  /** Record a failed deletion of `id`: the next attempt waits 1 s, 2 s, 4 s … up to 5 min. */
  failed(id: string): void {
    const count = (this.failures.get(id)?.count ?? 0) + 1;
    this.failures.set(id, { count, nextAtMs: this.deps.clock.nowMs() + retryDelayMs(count) });
  }

  /** Record a verified deletion of `id`. */
  succeeded(id: string): void {
    this.failures.delete(id);
  }

  /** Reap host resources no row owns once their grace ran out. `rows` must be read after `host`. */
  async reapOrphans(host: HostResources, rows: readonly SandboxRecord[], report: HygieneReport): Promise<void> {
    const { sandboxes, driver, mutex, clock, logger, metrics } = this.deps;
    const owned = new Set(rows.map((r) => r.id));
    const decision = orphansDue(clock.nowMs(), host.sandboxIds, owned, this.firstSeenMs, this.graceMs, (id) =>
      mutex.isBusy(id),
    );
    this.firstSeenMs = decision.firstSeenMs;
    const kindsOf = (id: string): HostResourceKind[] => host.kinds?.[id] ?? ['directory'];
    // An operation that ended between the host listing and now (a delete that removed resources and row, a create
    // that wrote its row after the rows were read) is no leak: before calling an id found, list the host again and
    // read its row again. What is left of the race is an operation that starts after this check; that one holds the
    // id's lock, which the reaping below waits for and re-checks under.
    const stillThere = new Set(decision.newlySeen.length === 0 ? [] : (await driver.listHostResources()).sandboxIds);
    const notLeaks = new Set<string>();
    for (const id of decision.newlySeen) {
      if (!stillThere.has(id) || mutex.isBusy(id) || (await sandboxes.getAcrossTenants(id)) !== null) {
        this.firstSeenMs.delete(id);
        notLeaks.add(id);
        continue;
      }
      report.orphansFound.push(id);
      metrics?.leak('found', kindsOf(id));
      logger.warn({ sandboxId: id, kinds: kindsOf(id), graceMs: this.graceMs }, 'host resources no row owns');
    }
    for (const id of decision.due) {
      // With a grace of 0 a newly seen id is due at once: one the re-check cleared is not reaped either.
      if (notLeaks.has(id) || !this.mayAttempt(id)) continue;
      try {
        await mutex.run(id, async () => {
          if ((await sandboxes.getAcrossTenants(id)) !== null) return;
          await driver.delete(id);
          this.firstSeenMs.delete(id);
          this.succeeded(id);
          report.orphansReaped.push(id);
          metrics?.leak('reaped', kindsOf(id));
        });
      } catch (error) {
        this.failed(id);
        report.failures.push({ id, message: (error as Error).message });
      }
    }
  }

  /** Reap snapshot blobs no snapshot row owns (a crash between bytes and row) once their grace ran out. */
  async reapBlobs(report: HygieneReport): Promise<void> {
    const { snapshots, blobs, clock, metrics } = this.deps;
    // Keys before rows: a snapshot committed in between has its row by the time rows are read. A remote store that
    // does not answer skips the pass (reported), never fails the reconcile pass around it.
    const keys = await blobs.keys().catch((error: unknown) => {
      report.failures.push({ id: 'snapshot-store', message: (error as Error).message });
      return null;
    });
    if (keys === null) return;
    const owned = new Set((await snapshots.listAcrossTenants()).map((s) => s.id));
    const decision = orphansDue(clock.nowMs(), keys, owned, this.blobFirstSeenMs, this.graceMs);
    this.blobFirstSeenMs = decision.firstSeenMs;
    for (const key of decision.newlySeen) {
      report.orphansFound.push(key);
      metrics?.leak('found', ['snapshot_blob']);
    }
    const ownedNow =
      decision.due.length === 0 ? owned : new Set((await snapshots.listAcrossTenants()).map((s) => s.id));
    for (const key of decision.due) {
      if (ownedNow.has(key)) continue;
      await blobs.delete(key).catch(() => undefined);
      this.blobFirstSeenMs.delete(key);
      report.orphansReaped.push(key);
      metrics?.leak('reaped', ['snapshot_blob']);
    }
    // A remote store's chunks and references no snapshot owns (an upload cut short, a delete while S3 was down).
    if (blobs.sweep !== undefined) {
      const swept = await blobs.sweep(clock.nowMs(), this.graceMs).catch((error: unknown) => {
        report.failures.push({ id: 'snapshot-store', message: (error as Error).message });
        return null;
      });
      if (swept !== null && swept.refsRemoved + swept.chunksRemoved > 0) {
        this.deps.logger.info(swept, 'snapshot store objects no snapshot owns removed');
      }
    }
  }

  /**
   * Paused and stopped rows whose host resources are gone (someone removed the directory, the disk failed) get
   * state `error` with a `ResourcesMissing` condition saying what to do. `host` must be read before `rows`.
   */
  async markVanished(host: HostResources, rows: readonly SandboxRecord[], report: HygieneReport): Promise<void> {
    const { sandboxes, driver, mutex, clock, logger } = this.deps;
    const onHost = new Set(host.sandboxIds);
    for (const row of rows) {
      if ((row.state !== 'paused' && row.state !== 'stopped') || onHost.has(row.id) || mutex.isBusy(row.id)) continue;
      try {
        await mutex.run(row.id, async () => {
          const fresh = await sandboxes.getAcrossTenants(row.id);
          if (fresh === null || (fresh.state !== 'paused' && fresh.state !== 'stopped')) return;
          if ((await driver.observe(fresh.id)).status !== 'missing') return;
          const at = isoNow(clock);
          const updated = await sandboxes.update(
            fresh.tenantId,
            fresh.id,
            fresh.version,
            {
              state: 'error',
              conditions: withConditions(fresh.conditions, [
                {
                  type: 'Ready',
                  status: 'false',
                  reason: 'ResourcesMissing',
                  message: `the sandbox was ${fresh.state} but its disk and state are gone from the host; delete it (its files cannot be recovered) or reset it to a snapshot`,
                  at,
                },
              ]),
            },
            at,
          );
          if (updated !== null) {
            report.markedError.push(fresh.id);
            logger.warn({ sandboxId: fresh.id, was: fresh.state }, 'sandbox resources vanished from the host');
          }
        });
      } catch (error) {
        report.failures.push({ id: row.id, message: (error as Error).message });
      }
    }
  }

  /**
   * `error` and `stopped` rows whose runtime ended but still holds host resources (a runsc container record,
   * mounts, a loop device, cgroups: a pause, reset or start that failed because its sentry or gofer died) are
   * released with `driver.stop` (the disk and files stay; a start boots them again). Only when the driver sees the
   * runtime `stopped` (no running container, no complete pause image); quarantined rows are left for inspection.
   */
  async releaseEnded(host: HostResources, rows: readonly SandboxRecord[], report: HygieneReport): Promise<void> {
    const { sandboxes, driver, mutex, logger } = this.deps;
    const runtimeKinds: readonly HostResourceKind[] = ['container', 'mount', 'loop_device', 'cgroup'];
    const ended = (state: string) => state === 'error' || state === 'stopped';
    for (const row of rows) {
      if (!ended(row.state) || row.quarantine || mutex.isBusy(row.id)) continue;
      const kinds = host.kinds?.[row.id] ?? [];
      if (!kinds.some((kind) => runtimeKinds.includes(kind))) continue;
      try {
        await mutex.run(row.id, async () => {
          const fresh = await sandboxes.getAcrossTenants(row.id);
          if (fresh === null || !ended(fresh.state) || fresh.quarantine) return;
          if ((await driver.observe(fresh.id)).status !== 'stopped') return;
          await driver.stop(fresh.id);
          report.released = [...(report.released ?? []), fresh.id];
          logger.warn(
            { sandboxId: fresh.id, state: fresh.state, kinds },
            'released the host runtime of an ended sandbox',
          );
        });
      } catch (error) {
        report.failures.push({ id: row.id, message: (error as Error).message });
      }
    }
  }
}
