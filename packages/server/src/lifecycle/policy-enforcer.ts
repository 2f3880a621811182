import { type Condition, ErrorCode } from '@burrow/contract';
import type { RuntimeDriver } from '@burrow/runtime';
import type { Logger } from 'pino';
import type { BlobStore } from '../services/blob-store.js';
import type { EventService } from '../services/event-service.js';
import type { SandboxService } from '../services/sandbox-service.js';
import { type SandboxRecord, type SandboxStore, withConditions } from '../store/sandbox-store.js';
import type { SnapshotStore } from '../store/snapshot-store.js';
import { ApiError } from '../util/api-error.js';
import { type Clock, isoNow } from '../util/clock.js';
import type { KeyedMutex } from '../util/keyed-mutex.js';
import type { ActivityTracker } from './activity-tracker.js';
import { type ActorContext, SYSTEM_RECONCILER } from './actor-context.js';
import { deadlinesOf, isPolicyExempt } from './expiry-view.js';
import { type Deadline, decidePolicyStep, type PolicyStep, snapshotRetentionSteps } from './lifecycle-policy.js';

/** Longest wait for the background-command probe before an idle pause, ms (then the sandbox counts as busy). */
const BUSY_PROBE_TIMEOUT_MS = 5000;

/**
 * Shortest wait before a policy pause refused by the sandbox's own state (a process holds a deleted file or a host
 * socket, `deleted_file_open` / `host_socket_open`) is tried again, ms: that state rarely clears within seconds.
 */
export const BLOCKED_PAUSE_RETRY_MS = 60_000;

/** Longest wait between retries of a failed policy step, ms. */
const MAX_RETRY_MS = 300_000;

/** Reason codes of policy actions, recorded on events and conditions. */
export const POLICY_REASONS: Record<Deadline['reason'], string> = {
  timeout: 'TimeoutExpired',
  idle: 'IdleTimeout',
  'max-age': 'MaxAgeReached',
  'paused-retention': 'PausedRetentionExpired',
};

/** Dependencies of the {@link PolicyEnforcer}. */
export interface PolicyEnforcerDeps {
  sandboxes: SandboxStore;
  snapshots: SnapshotStore;
  blobs: BlobStore;
  service: SandboxService;
  driver: RuntimeDriver;
  events: EventService;
  activity: ActivityTracker;
  actors: ActorContext;
  mutex: KeyedMutex;
  clock: Clock;
  logger: Logger;
  /** How long before a deletion by policy its warning event comes, ms (BURROW_EXPIRY_WARNING_MS). */
  warningMs: number;
  /** Whether a background command runs in the sandbox (a running command is never idle). */
  busyProbe?: (record: SandboxRecord) => Promise<boolean>;
  /**
   * First retry delay after a failed action, ms; doubles per failure, capped at 5 minutes. A pause the sandbox's own
   * state refuses waits at least {@link BLOCKED_PAUSE_RETRY_MS}. @default 1000
   */
  retryBaseMs?: number;
}

/** What one pass did, for logs and tests. */
export interface PolicyReport {
  warned: string[];
  paused: string[];
  stopped: string[];
  deleted: string[];
  snapshotsDeleted: string[];
  failures: Array<{ id: string; message: string }>;
}

/**
 * Enforces lifecycle policies: one idempotent step per sandbox per pass (warn, then act), under the sandbox's
 * lock, re-deciding on the row read under the lock and writing with the row version (fenced). A failed step is
 * retried with exponential backoff and leaves a `PolicyActionFailed` condition. Quarantined sandboxes are never
 * touched ({@link isPolicyExempt}). Every action runs as `system:reconciler` with the policy's reason, so the
 * events it causes say who and why.
 */
export class PolicyEnforcer {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<PolicyReport> | null = null;
  /** Failed steps by sandbox: how many in a row, when to try again, and the error code of the last (its cause). */
  private readonly backoff = new Map<string, { failures: number; notBeforeMs: number; cause: string }>();

  constructor(private readonly deps: PolicyEnforcerDeps) {}

  /** One pass now; concurrent calls share it. */
  runOnce(): Promise<PolicyReport> {
    if (this.running === null) {
      this.running = this.pass().finally(() => {
        this.running = null;
      });
    }
    return this.running;
  }

  /** Run a pass every `intervalMs` until {@link stop}. */
  start(intervalMs: number): void {
    if (this.timer !== null) return;
    const tick = () => {
      this.runOnce()
        .catch((error: unknown) => this.deps.logger.error({ err: error }, 'policy pass failed'))
        .finally(() => {
          if (this.timer !== null) this.timer = setTimeout(tick, intervalMs);
        });
    };
    this.timer = setTimeout(tick, intervalMs);
  }

  /** Stop the loop and wait for a pass in progress. */
  async stop(): Promise<void> {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    await this.running?.catch(() => undefined);
  }

  private decide(row: SandboxRecord): { step: PolicyStep } {
    const { activity, clock, warningMs } = this.deps;
    const deadlines = deadlinesOf(row, activity.snapshot(row.id), activity.startedAtMs);
    const l = row.lifecycle;
    return decidePolicyStep(
      clock.nowMs(),
      deadlines,
      {
        warnedForMs: l?.expiryWarnedFor ? Date.parse(l.expiryWarnedFor) : null,
        warnedAtMs: l?.expiryWarnedAt ? Date.parse(l.expiryWarnedAt) : null,
      },
      warningMs,
    );
  }

  private async pass(): Promise<PolicyReport> {
    const { sandboxes, mutex, clock, logger } = this.deps;
    const report: PolicyReport = {
      warned: [],
      paused: [],
      stopped: [],
      deleted: [],
      snapshotsDeleted: [],
      failures: [],
    };
    const rows = await sandboxes.listAcrossTenants();
    for (const row of rows) {
      if (mutex.isBusy(row.id)) continue;
      const held = this.backoff.get(row.id);
      if (held !== undefined && held.notBeforeMs > clock.nowMs()) continue;
      const { step } = this.decide(row);
      logger.debug({ sandboxId: row.id, step }, 'policy step');
      if (step.type === 'none') {
        this.backoff.delete(row.id);
        continue;
      }
      if (step.type === 'act' && step.deadline.reason === 'idle' && (await this.busy(row))) {
        this.deps.activity.touch(row.id);
        continue;
      }
      const reason = step.type === 'warn' ? 'ExpiryWarning' : POLICY_REASONS[step.deadline.reason];
      try {
        await this.deps.actors.run({ actor: SYSTEM_RECONCILER, reason }, () =>
          mutex.run(row.id, () => this.apply(row.id, step, report)),
        );
        this.backoff.delete(row.id);
      } catch (error) {
        const failures = (held?.failures ?? 0) + 1;
        const cause = error instanceof ApiError ? error.code : ErrorCode.internal;
        const blocked = cause === ErrorCode.deletedFileOpen || cause === ErrorCode.hostSocketOpen;
        const delayMs = Math.min(
          Math.max((this.deps.retryBaseMs ?? 1000) * 2 ** (failures - 1), blocked ? BLOCKED_PAUSE_RETRY_MS : 0),
          MAX_RETRY_MS,
        );
        this.backoff.set(row.id, { failures, notBeforeMs: clock.nowMs() + delayMs, cause });
        report.failures.push({ id: row.id, message: (error as Error).message });
        logger.warn(
          { err: error, sandboxId: row.id, step: step.type, failures, retryInMs: delayMs },
          'policy step failed',
        );
        await this.markFailed(row.id, step, error).catch(() => undefined);
        // One event per run of failures with the same cause: the retries after it are in the log.
        if (step.type === 'act' && step.deadline.action === 'pause' && held?.cause !== cause) {
          await this.recordPauseFailed(row, step.deadline, error, cause, delayMs).catch((e: unknown) =>
            logger.warn({ err: e, sandboxId: row.id }, 'recording pause_failed failed'),
          );
        }
      }
    }
    await this.expireSnapshots(rows, report);
    const acted = Object.values(report).reduce((n, list) => n + list.length, 0);
    if (acted > 0) logger.info({ report }, 'policy pass acted');
    return report;
  }

  /** Whether a background command runs (asked before an idle pause); a probe that fails or hangs counts as busy. */
  private async busy(row: SandboxRecord): Promise<boolean> {
    if (this.deps.busyProbe === undefined) return false;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(true), BUSY_PROBE_TIMEOUT_MS);
    });
    try {
      const busy = await Promise.race([this.deps.busyProbe(row).catch(() => true), timeout]);
      this.deps.logger.debug({ sandboxId: row.id, busy }, 'idle probe');
      return busy;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Apply `planned` to sandbox `id` under its lock, if the fresh row still calls for it. */
  private async apply(id: string, planned: PolicyStep, report: PolicyReport): Promise<void> {
    const { sandboxes, events, clock } = this.deps;
    const fresh = await sandboxes.getAcrossTenants(id);
    if (fresh === null || isPolicyExempt(fresh)) return;
    const { step } = this.decide(fresh);
    if (step.type !== planned.type || step.type === 'none') return;
    const now = isoNow(clock);
    if (step.type === 'warn') {
      const deleteAt = new Date(step.deleteAtMs).toISOString();
      // The warning and its bookkeeping commit together: a crash neither loses nor repeats it.
      const warning = events.inTransaction({
        tenantId: fresh.tenantId,
        type: 'warning',
        sandboxId: id,
        reason: 'ExpiryWarning',
        message: `sandbox ${id} will be deleted at ${deleteAt} (${step.deadline.reason} policy); extend or change the policy to keep it`,
        data: { deleteAt, policy: step.deadline.reason, action: 'delete' },
      });
      const updated = await sandboxes.update(
        fresh.tenantId,
        id,
        fresh.version,
        { lifecycle: { expiryWarnedFor: new Date(step.deadline.atMs).toISOString(), expiryWarnedAt: now } },
        now,
        { also: warning },
      );
      if (updated === null) throw new Error('the row changed while the warning was recorded; retrying');
      report.warned.push(id);
      return;
    }
    const { deadline } = step;
    if (deadline.action === 'delete') {
      // `expired` commits with the `deleting` row: a crash keeps both (the reconciler finishes the delete) or neither.
      const expired = events.inTransaction({
        tenantId: fresh.tenantId,
        type: 'expired',
        sandboxId: id,
        reason: POLICY_REASONS[deadline.reason],
        message: `sandbox ${id} expired (${deadline.reason} policy)`,
        data: { policy: deadline.reason, deadlineAt: new Date(deadline.atMs).toISOString() },
      });
      await this.deps.service.deleteUnderLock(fresh, { also: expired });
      this.deps.activity.forget(id);
      report.deleted.push(id);
      return;
    }
    let done: SandboxRecord;
    if (deadline.action === 'pause') {
      done = await this.deps.service.persistence.pauseUnderLock(fresh);
      report.paused.push(id);
    } else {
      done = await this.stopUnderLock(fresh);
      report.stopped.push(id);
    }
    // A TTL that paused or stopped the sandbox is spent: a resume does not pause it again at once.
    if (deadline.reason === 'timeout') {
      await sandboxes.update(done.tenantId, id, done.version, { expiresAt: null }, isoNow(clock));
    }
  }

  private async stopUnderLock(record: SandboxRecord): Promise<SandboxRecord> {
    const { sandboxes, driver, clock } = this.deps;
    const stopping = await sandboxes.update(
      record.tenantId,
      record.id,
      record.version,
      { state: 'stopping', desiredState: 'stopped' },
      isoNow(clock),
    );
    if (stopping === null) throw new Error('the row changed before the stop');
    await driver.stop(record.id);
    const condition: Condition = {
      type: 'Stopped',
      status: 'true',
      reason: 'TimeoutExpired',
      message: 'the TTL ran out; processes ended, the disk is kept',
      at: isoNow(clock),
    };
    const stopped = await sandboxes.update(
      record.tenantId,
      record.id,
      stopping.version,
      { state: 'stopped', conditions: withConditions(stopping.conditions, [condition]) },
      isoNow(clock),
    );
    if (stopped === null) throw new Error('the row changed during the stop');
    return stopped;
  }

  /** The `pause_failed` event of a policy pause that failed with `error` (an {@link ApiError} code as `cause`). */
  private async recordPauseFailed(
    row: SandboxRecord,
    deadline: Deadline,
    error: unknown,
    cause: string,
    retryInMs: number,
  ): Promise<void> {
    const retryAt = new Date(this.deps.clock.nowMs() + retryInMs).toISOString();
    await this.deps.actors.run({ actor: SYSTEM_RECONCILER, reason: POLICY_REASONS[deadline.reason] }, () =>
      this.deps.events.record({
        tenantId: row.tenantId,
        type: 'pause_failed',
        sandboxId: row.id,
        message: `the ${deadline.reason} policy could not pause sandbox ${row.id} (it keeps running; retried at ${retryAt} at the earliest): ${(error as Error).message}`,
        data: {
          policy: deadline.reason,
          cause,
          retryAt,
          ...(error instanceof ApiError && error.hint !== undefined ? { hint: error.hint } : {}),
          ...(error instanceof ApiError && error.details !== undefined ? { details: error.details } : {}),
        },
      }),
    );
  }

  private async markFailed(id: string, step: PolicyStep, error: unknown): Promise<void> {
    const { sandboxes, mutex, clock } = this.deps;
    await mutex.run(id, async () => {
      const fresh = await sandboxes.getAcrossTenants(id);
      if (fresh === null) return;
      const condition: Condition = {
        type: 'PolicyActionFailed',
        status: 'true',
        reason: step.type === 'act' ? POLICY_REASONS[step.deadline.reason] : 'ExpiryWarning',
        message: `the policy step failed and is retried with backoff: ${(error as Error).message}`,
        at: isoNow(clock),
      };
      await sandboxes.update(
        fresh.tenantId,
        id,
        fresh.version,
        { conditions: withConditions(fresh.conditions, [condition]) },
        isoNow(clock),
      );
    });
  }

  /**
   * Snapshot retention: past `expiresAt`, or beyond keep-last-N of their sandbox; each deletion is announced by a
   * `warning` event at least `warningMs` ahead (the planned time is stored and shown as the snapshot's `expiresAt`).
   */
  private async expireSnapshots(rows: SandboxRecord[], report: PolicyReport): Promise<void> {
    const { snapshots, blobs, mutex, clock, events, warningMs } = this.deps;
    const keep = new Map<string, number>();
    const exempt = new Set<string>();
    for (const r of rows) {
      const n = r.lifecycle?.snapshotKeepLast;
      if (n !== null && n !== undefined) keep.set(r.id, n);
      if (isPolicyExempt(r)) exempt.add(r.id);
    }
    const all = (await snapshots.listAcrossTenants()).filter((s) => s.state === 'ready' && !exempt.has(s.sandboxId));
    const { steps } = snapshotRetentionSteps(
      clock.nowMs(),
      all.map((s) => ({
        id: s.id,
        sandboxId: s.sandboxId,
        createdAtMs: Date.parse(s.createdAt),
        expiresAtMs: s.expiresAt ? Date.parse(s.expiresAt) : null,
        deleteAtMs: s.retentionDeleteAt ? Date.parse(s.retentionDeleteAt) : null,
      })),
      keep,
      warningMs,
    );
    const byId = new Map(all.map((s) => [s.id, s]));
    for (const step of steps) {
      const snapshot = byId.get(step.id);
      if (snapshot === undefined || mutex.isBusy(snapshot.sandboxId)) continue;
      const { id } = step;
      const label = snapshot.name ?? id;
      try {
        if (step.type === 'clear') {
          await snapshots.setRetentionDeleteAt(id, null);
          continue;
        }
        const why = step.reason === 'expires-at' ? 'SnapshotRetentionExpired' : 'SnapshotKeepLast';
        if (step.type === 'warn') {
          const deleteAt = new Date(step.deleteAtMs).toISOString();
          await mutex.run(snapshot.sandboxId, async () => {
            const warning = events.inTransaction({
              tenantId: snapshot.tenantId,
              type: 'warning',
              sandboxId: snapshot.sandboxId,
              snapshotId: id,
              reason: 'ExpiryWarning',
              message:
                `snapshot ${label} will be deleted at ${deleteAt} by retention (${step.reason}); ` +
                "raise the sandbox's snapshotKeepLast or extend the snapshot's expiresAt to keep it",
              data: { deleteAt, policy: step.reason, action: 'delete', name: snapshot.name },
            });
            await snapshots.setRetentionDeleteAt(id, deleteAt, { also: warning });
          });
          report.warned.push(id);
          continue;
        }
        await this.deps.actors.run({ actor: SYSTEM_RECONCILER, reason: why }, () =>
          mutex.run(snapshot.sandboxId, async () => {
            // Row (with its event) first: a crash before the bytes are gone leaves a blob the reconciler reaps.
            await snapshots.remove(id, {
              also: events.inTransaction({
                tenantId: snapshot.tenantId,
                type: 'snapshot_deleted',
                sandboxId: snapshot.sandboxId,
                snapshotId: id,
                message: `snapshot ${label} deleted by retention (${step.reason})`,
                data: { name: snapshot.name, policy: step.reason },
              }),
            });
            await blobs.delete(id);
          }),
        );
        report.snapshotsDeleted.push(id);
      } catch (error) {
        report.failures.push({ id, message: (error as Error).message });
      }
    }
  }
}
