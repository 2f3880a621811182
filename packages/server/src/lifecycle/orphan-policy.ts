/**
 * Pure decisions of host hygiene: which host resources no row owns are due for reaping after a grace period, and
 * how long a failed deletion waits before the next attempt.
 */

/** Result of {@link orphansDue}. */
export interface OrphanDecision {
  /** Ids unowned now and not tracked before: count them as found. */
  newlySeen: string[];
  /** Ids unowned for at least the grace period and not busy: reap them now (after a re-check under their lock). */
  due: string[];
  /** The tracking map for the next pass: id → epoch ms first seen unowned (ids owned again or gone are dropped). */
  firstSeenMs: Map<string, number>;
}

/**
 * Decide which unowned host resources to reap.
 * A resource is reaped only once it was seen unowned for `graceMs` (first seen → due), never while `busy` (an
 * operation holds its id's lock: a create, fork or reset that has not written its row yet, or a delete that has
 * not removed everything yet). A busy id is neither found nor tracked: its grace starts at the first pass that
 * sees it unowned and idle, so a create or delete that spans a pass is not counted as a leak found.
 * @param nowMs epoch ms of this pass
 * @param hostIds ids with any resource on the host
 * @param ownedIds ids a row owns
 * @param firstSeenMs tracking of earlier passes (not modified)
 * @param graceMs how long an unowned resource is left alone, ms
 * @param busy whether an operation works on the id now
 */
export function orphansDue(
  nowMs: number,
  hostIds: readonly string[],
  ownedIds: ReadonlySet<string>,
  firstSeenMs: ReadonlyMap<string, number>,
  graceMs: number,
  busy: (id: string) => boolean = () => false,
): OrphanDecision {
  const next = new Map<string, number>();
  const newlySeen: string[] = [];
  const due: string[] = [];
  for (const id of [...new Set(hostIds)].sort()) {
    if (ownedIds.has(id)) continue;
    // Whatever holds a busy id's lock may still write or remove its row: not a leak (yet), and its grace restarts.
    if (busy(id)) continue;
    const seen = firstSeenMs.get(id);
    if (seen === undefined) newlySeen.push(id);
    const first = seen ?? nowMs;
    next.set(id, first);
    if (nowMs - first >= graceMs) due.push(id);
  }
  return { newlySeen, due, firstSeenMs: next };
}

/** Backoff of {@link retryDelayMs}. */
export interface BackoffOptions {
  /** Delay after the first failure, ms. @default 1_000 */
  baseMs?: number;
  /** Longest delay, ms. @default 300_000 (5 min) */
  maxMs?: number;
}

/**
 * Delay before attempt `failures + 1` of a deletion that failed `failures` times: `baseMs · 2^(failures-1)`,
 * capped at `maxMs`; 0 before the first failure.
 */
export function retryDelayMs(failures: number, options: BackoffOptions = {}): number {
  if (failures <= 0) return 0;
  const base = options.baseMs ?? 1_000;
  const max = options.maxMs ?? 300_000;
  return Math.min(max, base * 2 ** Math.min(failures - 1, 30));
}
