import type { Clock } from '../util/clock.js';

/** What the tracker knows of one sandbox's activity. */
export interface ActivitySnapshot {
  /** Last activity, epoch ms, or null when none was seen since this process started. */
  lastActivityMs: number | null;
  /** Holds open now (running commands, open streams) plus an unexpired keepalive lease. */
  busy: boolean;
}

/**
 * In-memory record of sandbox activity for the idle policy (ARCHITECTURE §5): a running command, an open
 * exec/PTY/WebSocket stream, a file call, a keepalive lease. Services call {@link touch} on each call and
 * {@link hold} for the life of a command or stream. Built once in main.ts and passed in; nothing global.
 * After a restart nothing is known, so the policy counts from the later of the row's last change and the
 * tracker's creation: an idle deadline only moves later across a restart, never earlier.
 */
export class ActivityTracker {
  private readonly last = new Map<string, number>();
  private readonly holds = new Map<string, number>();
  private readonly leases = new Map<string, number>();
  /** When this tracker started, epoch ms (the floor of every idle clock). */
  readonly startedAtMs: number;

  constructor(private readonly clock: Clock) {
    this.startedAtMs = clock.nowMs();
  }

  /** Record activity on sandbox `id` now. */
  touch(id: string): void {
    this.last.set(id, this.clock.nowMs());
  }

  /**
   * Mark sandbox `id` busy until the returned release is called (idempotent); both ends count as activity.
   * @returns release
   */
  hold(id: string): () => void {
    this.touch(id);
    this.holds.set(id, (this.holds.get(id) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.touch(id);
      const n = (this.holds.get(id) ?? 1) - 1;
      if (n <= 0) this.holds.delete(id);
      else this.holds.set(id, n);
    };
  }

  /**
   * A keepalive lease: sandbox `id` counts as busy for `durationMs` from now (a longer lease already held stays).
   * @param durationMs lease length, ms; 0 just records activity now
   */
  lease(id: string, durationMs: number): void {
    this.touch(id);
    if (durationMs <= 0) return;
    const until = this.clock.nowMs() + durationMs;
    this.leases.set(id, Math.max(until, this.leases.get(id) ?? 0));
  }

  /** What is known of sandbox `id` now. An expired lease counts as activity at its end. */
  snapshot(id: string): ActivitySnapshot {
    const now = this.clock.nowMs();
    const leaseUntil = this.leases.get(id);
    let last = this.last.get(id) ?? null;
    if (leaseUntil !== undefined) {
      if (leaseUntil > now) return { lastActivityMs: now, busy: true };
      last = Math.max(last ?? 0, leaseUntil);
    }
    return { lastActivityMs: last, busy: (this.holds.get(id) ?? 0) > 0 };
  }

  /** Forget sandbox `id` (after its deletion). */
  forget(id: string): void {
    this.last.delete(id);
    this.holds.delete(id);
    this.leases.delete(id);
  }
}
