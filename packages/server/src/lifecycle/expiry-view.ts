import type { Expiry } from '@burrow/contract';
import { DEFAULT_LIFECYCLE, type SandboxRecord } from '../store/sandbox-store.js';
import type { ActivitySnapshot } from './activity-tracker.js';
import {
  type ActivityFacts,
  type Deadlines,
  deadlinesFor,
  type LifecyclePolicy,
  type PolicyFacts,
} from './lifecycle-policy.js';

const ms = (iso: string | null | undefined): number | null =>
  iso === null || iso === undefined ? null : Date.parse(iso);
const iso = (epochMs: number | null): string | null => (epochMs === null ? null : new Date(epochMs).toISOString());

/**
 * Hook for part B's quarantine: a quarantined sandbox is exempt from every policy. Reads the record's
 * `quarantine` field when the store provides one.
 */
export function isPolicyExempt(record: SandboxRecord): boolean {
  const q = (record as { quarantine?: unknown }).quarantine;
  return q !== undefined && q !== null && q !== false;
}

/** The policy of a row. */
export function policyOf(r: SandboxRecord): LifecyclePolicy {
  const l = r.lifecycle ?? DEFAULT_LIFECYCLE;
  return {
    timeoutMs: r.timeoutMs,
    timeoutAction: l.timeoutAction,
    idleTimeoutMs: l.idleTimeoutMs,
    maxAgeMs: l.maxAgeMs,
    pausedRetentionMs: l.pausedRetentionMs,
  };
}

/** The policy facts of a row. */
export function factsOf(r: SandboxRecord): PolicyFacts {
  return {
    state: r.state,
    createdAtMs: Date.parse(r.createdAt),
    timeoutAtMs: ms(r.expiresAt),
    pausedAtMs: ms(r.lifecycle?.pausedAt),
    quarantined: isPolicyExempt(r),
  };
}

/**
 * Activity facts of a row: the tracker's view, floored at the row's last change and at `floorMs` (the tracker's
 * start), so that an idle deadline never moves earlier across a restart.
 */
export function activityOf(r: SandboxRecord, seen: ActivitySnapshot | null, floorMs: number): ActivityFacts {
  return {
    lastActivityMs: Math.max(seen?.lastActivityMs ?? 0, Date.parse(r.updatedAt), floorMs),
    busy: seen?.busy ?? false,
  };
}

/** Every deadline of a row. */
export function deadlinesOf(r: SandboxRecord, seen: ActivitySnapshot | null, floorMs: number): Deadlines {
  return deadlinesFor(policyOf(r), factsOf(r), activityOf(r, seen, floorMs));
}

/** The lifecycle fields of the API view of a sandbox. */
export interface LifecycleView {
  timeoutAction: LifecyclePolicy['timeoutAction'];
  idleTimeoutMs: number | null;
  maxAgeMs: number | null;
  pausedRetentionMs: number | null;
  snapshotKeepLast: number | null;
  expiresAt: string | null;
  expiry: Expiry | null;
  idleDeadlineAt: string | null;
  timeoutAt: string | null;
}

/**
 * When a deletion by policy due at `atMs` really happens: once its warning is recorded, not before
 * `warnedAt + warningMs`; before it, not before `nowMs + warningMs` (as {@link decidePolicyStep} decides), so a
 * deadline set inside the warning window (a TTL shorter than the warning time, for example), or warned late after a
 * restart, is shown when it will be carried out rather than earlier.
 * @param warningMs the configured warning time, ms (null: unknown, `atMs` is returned)
 * @param nowMs the current time, epoch ms (null: unknown, an unwarned deletion is shown at `atMs`)
 * @returns epoch ms
 */
export function effectiveDeletionMs(
  r: SandboxRecord,
  atMs: number,
  warningMs: number | null,
  nowMs: number | null = null,
): number {
  if (warningMs === null) return atMs;
  const l = r.lifecycle;
  if (l?.expiryWarnedFor && l.expiryWarnedAt && Date.parse(l.expiryWarnedFor) === atMs) {
    return Math.max(atMs, Date.parse(l.expiryWarnedAt) + warningMs);
  }
  return nowMs === null ? atMs : Math.max(atMs, nowMs + warningMs);
}

/**
 * The lifecycle fields of the API view of `r` given what the activity tracker knows (null: nothing).
 * @param warningMs the configured warning time before a deletion by policy, ms (null: a warned deletion is shown
 *   at its deadline rather than when it is carried out)
 * @param nowMs the current time, epoch ms, for a deletion not warned yet (null: shown at its deadline)
 */
export function lifecycleView(
  r: SandboxRecord,
  seen: ActivitySnapshot | null = null,
  floorMs = 0,
  warningMs: number | null = null,
  nowMs: number | null = null,
): LifecycleView {
  const l = r.lifecycle ?? DEFAULT_LIFECYCLE;
  const d = deadlinesOf(r, seen, floorMs);
  const due = d.next;
  const next =
    due !== null && due.action === 'delete'
      ? { ...due, atMs: effectiveDeletionMs(r, due.atMs, warningMs, nowMs) }
      : due;
  return {
    timeoutAction: l.timeoutAction,
    idleTimeoutMs: l.idleTimeoutMs,
    maxAgeMs: l.maxAgeMs,
    pausedRetentionMs: l.pausedRetentionMs,
    snapshotKeepLast: l.snapshotKeepLast,
    expiresAt: next === null ? null : iso(next.atMs),
    expiry: next === null ? null : { at: new Date(next.atMs).toISOString(), action: next.action, reason: next.reason },
    idleDeadlineAt: iso(d.idleAtMs),
    timeoutAt: r.expiresAt,
  };
}
