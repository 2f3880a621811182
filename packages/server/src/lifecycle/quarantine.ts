import type { SandboxRecord } from '../store/sandbox-store.js';

/**
 * Whether a sandbox is quarantined: set aside for inspection. Policies (TTL, idle, max age, retention) must leave
 * such a sandbox alone, and the reconciler only observes it; exec, writes, commands, fork, reset and delete need an
 * admin key until it is released.
 */
export function isQuarantined(record: Pick<SandboxRecord, 'quarantine'>): boolean {
  return record.quarantine !== undefined && record.quarantine !== null;
}
