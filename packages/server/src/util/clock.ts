/** Source of the current time; injected so that policy and reconciler tests run on a fixed clock. */
export interface Clock {
  /** Now, as epoch milliseconds. */
  nowMs(): number;
}

/** The wall clock. */
export const systemClock: Clock = { nowMs: () => Date.now() };

/** ISO-8601 instant of `clock`'s now. */
export function isoNow(clock: Clock): string {
  return new Date(clock.nowMs()).toISOString();
}
