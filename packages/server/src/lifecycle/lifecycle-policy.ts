import type { SandboxState } from '@burrow/contract';

/** What a TTL does when it runs out. */
export type TimeoutAction = 'pause' | 'stop' | 'delete';

/** Why a deadline exists; the reason recorded on the event and shown in `expiry.reason`. */
export type ExpiryReason = 'timeout' | 'idle' | 'max-age' | 'paused-retention';

/** What a policy does at its deadline. */
export type PolicyAction = 'pause' | 'stop' | 'delete';

/** The lifecycle policies of one sandbox. Every field is optional: null means the policy is off. */
export interface LifecyclePolicy {
  /** Running-time TTL from creation or from the last extension, ms; its clock stops while the sandbox is paused. */
  timeoutMs: number | null;
  /** What the TTL does. @default 'delete' */
  timeoutAction: TimeoutAction;
  /** Pause after this long without activity, ms. */
  idleTimeoutMs: number | null;
  /** Hard end: delete this long after creation, whatever happens, ms. */
  maxAgeMs: number | null;
  /** Delete after being paused this long, ms. */
  pausedRetentionMs: number | null;
}

/** The facts of one sandbox the policies look at (times as epoch ms). */
export interface PolicyFacts {
  state: SandboxState;
  createdAtMs: number;
  /** When the TTL runs out (set from create or the last extension; cleared once a pause/stop TTL has fired). */
  timeoutAtMs: number | null;
  /** Since when the sandbox is paused (null when it is not). */
  pausedAtMs: number | null;
  /** Set aside by an admin: no policy touches it. */
  quarantined: boolean;
}

/** What the sandbox is doing, for the idle policy. */
export interface ActivityFacts {
  /** Last activity (command, stream, file call, keepalive) or the last state change, epoch ms. */
  lastActivityMs: number;
  /** A command runs or a stream is open: the sandbox is never idle. */
  busy: boolean;
}

/** One deadline: when, what happens then, and which policy asks for it. */
export interface Deadline {
  atMs: number;
  action: PolicyAction;
  reason: ExpiryReason;
}

/** Every deadline of a sandbox, the earliest first in `next`. */
export interface Deadlines {
  /** The earliest deadline of any policy, or null when none applies. */
  next: Deadline | null;
  /** When the sandbox pauses for idleness (null: no idle policy, not running, or busy now). */
  idleAtMs: number | null;
  /** The earliest deadline whose action is delete (warnings are about this one). */
  deletion: Deadline | null;
}

const RUNNING_LIKE: ReadonlySet<SandboxState> = new Set(['running']);

/**
 * Every deadline of a sandbox as a pure function of its policy, facts and activity. A deadline in the past is
 * still returned (it is due). Transitional, deleting and deleted sandboxes, and quarantined ones, have none.
 * @returns the deadlines; `next` is the earliest (ties: delete first, then stop, then pause)
 */
export function deadlinesFor(policy: LifecyclePolicy, facts: PolicyFacts, activity: ActivityFacts): Deadlines {
  const none: Deadlines = { next: null, idleAtMs: null, deletion: null };
  if (facts.quarantined) return none;
  if (!['running', 'paused', 'stopped', 'error'].includes(facts.state)) return none;
  const all: Deadline[] = [];
  if (facts.timeoutAtMs !== null) {
    const action = policy.timeoutAction;
    // The TTL counts running time: while paused its clock stops (resume moves the deadline later by the pause,
    // see resumedTimeoutAt), and the paused sandbox's life is governed by pausedRetentionMs.
    const applies =
      facts.state !== 'paused' &&
      (action === 'delete' ||
        (action === 'pause' && facts.state === 'running') ||
        (action === 'stop' && facts.state === 'running'));
    if (applies) all.push({ atMs: facts.timeoutAtMs, action, reason: 'timeout' });
  }
  let idleAtMs: number | null = null;
  if (policy.idleTimeoutMs !== null && RUNNING_LIKE.has(facts.state) && !activity.busy) {
    idleAtMs = activity.lastActivityMs + policy.idleTimeoutMs;
    all.push({ atMs: idleAtMs, action: 'pause', reason: 'idle' });
  }
  if (policy.maxAgeMs !== null) {
    all.push({ atMs: facts.createdAtMs + policy.maxAgeMs, action: 'delete', reason: 'max-age' });
  }
  if (policy.pausedRetentionMs !== null && facts.state === 'paused' && facts.pausedAtMs !== null) {
    all.push({ atMs: facts.pausedAtMs + policy.pausedRetentionMs, action: 'delete', reason: 'paused-retention' });
  }
  const rank: Record<PolicyAction, number> = { delete: 0, stop: 1, pause: 2 };
  all.sort((a, b) => a.atMs - b.atMs || rank[a.action] - rank[b.action]);
  return {
    next: all[0] ?? null,
    idleAtMs,
    deletion: all.find((d) => d.action === 'delete') ?? null,
  };
}

/** What the warning bookkeeping of a sandbox says: the deletion deadline a warning was recorded for, and when. */
export interface WarningFacts {
  /** The deletion deadline (epoch ms) the last warning was about, or null. */
  warnedForMs: number | null;
  /** When that warning was recorded, epoch ms. */
  warnedAtMs: number | null;
}

/** One step the reconciler takes for a sandbox's policies. */
export type PolicyStep =
  | { type: 'none' }
  /** Record a warning event (and the row's warning bookkeeping) for this deletion. */
  | { type: 'warn'; deadline: Deadline; deleteAtMs: number }
  /** Carry out the deadline's action. */
  | { type: 'act'; deadline: Deadline };

/**
 * The one policy step due at `nowMs`, and when to look again. A deletion by policy happens only after a warning
 * for that very deadline was recorded, and at least `warningMs` after the warning (so a warning recorded late,
 * after a restart, still gives the full notice). Pause and stop need no warning.
 * @param warningMs how long before a deletion the warning comes, ms
 * @returns the step, the effective deletion time (for display) and the epoch ms of the next look (null: none)
 */
export function decidePolicyStep(
  nowMs: number,
  deadlines: Deadlines,
  warning: WarningFacts,
  warningMs: number,
): { step: PolicyStep; deleteAtMs: number | null; nextCheckAtMs: number | null } {
  const deletion = deadlines.deletion;
  const warned = deletion !== null && warning.warnedForMs === deletion.atMs && warning.warnedAtMs !== null;
  const deleteAtMs =
    deletion === null
      ? null
      : warned
        ? Math.max(deletion.atMs, (warning.warnedAtMs ?? 0) + warningMs)
        : Math.max(deletion.atMs, nowMs + warningMs);
  const next = deadlines.next;
  if (next === null) return { step: { type: 'none' }, deleteAtMs, nextCheckAtMs: null };
  if (next.action !== 'delete') {
    // A pause or stop due before the deletion comes first; the deletion still gets its warning in time.
    if (next.atMs <= nowMs) return { step: { type: 'act', deadline: next }, deleteAtMs, nextCheckAtMs: nowMs };
    if (deletion !== null && !warned && deletion.atMs - warningMs <= nowMs) {
      return {
        step: { type: 'warn', deadline: deletion, deleteAtMs: nowMs + warningMs },
        deleteAtMs,
        nextCheckAtMs: nowMs,
      };
    }
    const warnAt = deletion !== null && !warned ? deletion.atMs - warningMs : Number.POSITIVE_INFINITY;
    return { step: { type: 'none' }, deleteAtMs, nextCheckAtMs: Math.min(next.atMs, warnAt) };
  }
  // The earliest deadline is the deletion.
  if (!warned) {
    const warnAtMs = next.atMs - warningMs;
    if (warnAtMs <= nowMs) {
      return {
        step: { type: 'warn', deadline: next, deleteAtMs: Math.max(next.atMs, nowMs + warningMs) },
        deleteAtMs,
        nextCheckAtMs: nowMs,
      };
    }
    return { step: { type: 'none' }, deleteAtMs, nextCheckAtMs: warnAtMs };
  }
  const dueMs = deleteAtMs ?? next.atMs;
  if (dueMs <= nowMs) return { step: { type: 'act', deadline: next }, deleteAtMs, nextCheckAtMs: nowMs };
  return { step: { type: 'none' }, deleteAtMs, nextCheckAtMs: dueMs };
}

/**
 * The TTL deadline after an extension: `nowMs + timeoutMs`, never earlier than a deadline already set unless
 * the caller shortens it on purpose (`allowShorten`). Other policies are separate fields and are not touched.
 * @returns epoch ms, or null for no TTL
 */
export function extendedTimeoutAt(
  nowMs: number,
  timeoutMs: number | null,
  currentAtMs: number | null,
  options: { allowShorten: boolean },
): number | null {
  if (timeoutMs === null) return null;
  const proposed = nowMs + timeoutMs;
  if (options.allowShorten || currentAtMs === null) return proposed;
  return Math.max(proposed, currentAtMs);
}

/** A snapshot as the retention policy sees it. */
export interface SnapshotFacts {
  id: string;
  sandboxId: string;
  createdAtMs: number;
  /** When it expires (epoch ms), or null. */
  expiresAtMs: number | null;
  /** When retention deletes it (epoch ms), set when its warning was recorded; null while not warned. */
  deleteAtMs: number | null;
}

/** Why retention deletes a snapshot: its `expiresAt` passed, or it is beyond keep-last-N of its sandbox. */
export type SnapshotRetentionReason = 'expires-at' | 'keep-last';

/** One retention step for one snapshot. */
export type SnapshotRetentionStep =
  /** Record a warning event and the planned deletion time. */
  | { type: 'warn'; id: string; reason: SnapshotRetentionReason; deleteAtMs: number }
  /** Delete it now (its warning came at least `warningMs` before). */
  | { type: 'delete'; id: string; reason: SnapshotRetentionReason }
  /** It is no longer due (expiresAt extended, keep-last raised, newer ones deleted): forget the warning. */
  | { type: 'clear'; id: string };

/**
 * Snapshot retention as warn-then-delete, like sandbox deletions by policy: a snapshot is due at its `expiresAt`,
 * or at once when it is beyond the newest `keepLast` of its sandbox (per source sandbox, from `keepLastBySandbox`;
 * missing means keep all). Its warning comes `warningMs` before it is due (at once when that time has passed), and
 * the deletion at `max(due, warning + warningMs)`, so every deletion by retention is announced at least
 * `warningMs` ahead.
 * @param warningMs how long before a deletion its warning comes, ms
 * @returns the steps due at `nowMs` (oldest snapshot first) and when to look again (epoch ms) or null
 */
export function snapshotRetentionSteps(
  nowMs: number,
  snapshots: readonly SnapshotFacts[],
  keepLastBySandbox: ReadonlyMap<string, number>,
  warningMs: number,
): { steps: SnapshotRetentionStep[]; nextCheckAtMs: number | null } {
  const excess = new Set<string>();
  const bySandbox = new Map<string, SnapshotFacts[]>();
  for (const s of snapshots) bySandbox.set(s.sandboxId, [...(bySandbox.get(s.sandboxId) ?? []), s]);
  for (const [sandboxId, list] of bySandbox) {
    const keep = keepLastBySandbox.get(sandboxId);
    if (keep === undefined) continue;
    const newestFirst = [...list].sort((a, b) => b.createdAtMs - a.createdAtMs || b.id.localeCompare(a.id));
    for (const s of newestFirst.slice(keep)) excess.add(s.id);
  }
  const steps: SnapshotRetentionStep[] = [];
  let nextCheckAtMs: number | null = null;
  const checkAt = (atMs: number) => {
    nextCheckAtMs = nextCheckAtMs === null ? atMs : Math.min(nextCheckAtMs, atMs);
  };
  for (const s of [...snapshots].sort((a, b) => a.createdAtMs - b.createdAtMs || a.id.localeCompare(b.id))) {
    const due: { atMs: number; reason: SnapshotRetentionReason } | null = excess.has(s.id)
      ? { atMs: nowMs, reason: 'keep-last' }
      : s.expiresAtMs !== null
        ? { atMs: s.expiresAtMs, reason: 'expires-at' }
        : null;
    const warnAtMs = due === null ? null : due.atMs - warningMs;
    if (due === null || warnAtMs === null || warnAtMs > nowMs) {
      if (s.deleteAtMs !== null) steps.push({ type: 'clear', id: s.id });
      if (warnAtMs !== null) checkAt(warnAtMs);
      continue;
    }
    if (s.deleteAtMs === null) {
      const deleteAtMs = Math.max(due.atMs, nowMs + warningMs);
      steps.push({ type: 'warn', id: s.id, reason: due.reason, deleteAtMs });
      checkAt(deleteAtMs);
      continue;
    }
    const deleteAtMs = Math.max(due.atMs, s.deleteAtMs);
    if (deleteAtMs <= nowMs) steps.push({ type: 'delete', id: s.id, reason: due.reason });
    else checkAt(deleteAtMs);
  }
  return { steps, nextCheckAtMs };
}
