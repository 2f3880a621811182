import type { Kysely } from 'kysely';
import type { DB } from './database.js';

/**
 * Extra work a store write runs INSIDE its own transaction, after its change is made: typically appending the
 * event that reports the change, so that a crash keeps both or neither (an event that is not a state transition,
 * for example `expired`, `snapshot_created` or a deletion `warning`). Whatever it writes through `trx` commits or
 * rolls back with the change; a throw rolls the whole write back.
 * @returns a callback run after the commit (for example to publish the stored event), or null
 */
export type InTransaction = (trx: Kysely<DB>) => Promise<(() => void) | null>;

/** Options of a store write that can carry {@link InTransaction} work. */
export interface WithInTransaction {
  /** Run inside the write's transaction after the change; not run when the write changes nothing (fenced). */
  also?: InTransaction | undefined;
}

/** Run each after-commit callback; a throwing callback must not turn a committed write into an error. */
export function runAfterCommit(callbacks: ReadonlyArray<(() => void) | null>): void {
  for (const callback of callbacks) {
    try {
      callback?.();
    } catch {
      // The write is committed; a listener's failure is its own.
    }
  }
}
