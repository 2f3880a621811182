import type { SandboxState } from '@burrow/contract';

/**
 * When a sandbox created at `nowMs` with TTL `timeoutMs` expires.
 * @returns ISO-8601 instant, or null for no TTL
 */
export function expiresAtFor(nowMs: number, timeoutMs: number | null): string | null {
  return timeoutMs === null ? null : new Date(nowMs + timeoutMs).toISOString();
}

/** What the reconciler knows of one sandbox row. */
export interface SandboxFacts {
  id: string;
  state: SandboxState;
  expiresAt: string | null;
}

/** One step the reconciler takes for a row. */
export type ReconcileAction =
  | { type: 'none' }
  /** Not decided here any more (the PolicyEnforcer expires sandboxes); kept for callers that still match it. */
  | { type: 'expire' }
  /** A `creating` or `deleting` row a previous process left: delete host resources and the row. */
  | { type: 'finish-interrupted' }
  /** A running row: check that its container still exists. */
  | { type: 'observe' }
  /** A `pausing`, `resuming` or `stopping` row a previous process left: finish the step or roll it back. */
  | { type: 'finish-transition' };

/**
 * Decide what to do with one row, as a pure function of `nowMs`, the row and whether an operation of this
 * process is working on it (`inFlight`). A `creating` or `deleting` row that nothing works on was left by a
 * crash or a failed delete.
 * @returns the action, and the epoch ms at which the row next needs a look (null: no deadline)
 */
export function decideSandbox(
  nowMs: number,
  facts: SandboxFacts,
  options: { inFlight: boolean },
): { action: ReconcileAction; nextCheckAtMs: number | null } {
  const expiresMs = facts.expiresAt === null ? null : Date.parse(facts.expiresAt);
  if (options.inFlight) return { action: { type: 'none' }, nextCheckAtMs: nowMs };
  if (facts.state === 'creating' || facts.state === 'deleting') {
    return { action: { type: 'finish-interrupted' }, nextCheckAtMs: null };
  }
  if (facts.state === 'deleted') return { action: { type: 'none' }, nextCheckAtMs: null };
  if (facts.state === 'pausing' || facts.state === 'resuming' || facts.state === 'stopping') {
    return { action: { type: 'finish-transition' }, nextCheckAtMs: null };
  }
  // Expiry by TTL and every other policy belongs to the PolicyEnforcer (lifecycle-policy.ts): it warns before it
  // deletes, and a TTL may pause or stop instead. This decision only repairs and observes.
  return {
    action: facts.state === 'running' ? { type: 'observe' } : { type: 'none' },
    nextCheckAtMs: expiresMs,
  };
}

/**
 * Host resources no row owns: ids the host reports that are not among `ownedIds`.
 * @returns orphan ids, sorted
 */
export function findOrphans(hostIds: readonly string[], ownedIds: ReadonlySet<string>): string[] {
  return hostIds.filter((id) => !ownedIds.has(id)).sort();
}
