import type { TimeoutAction } from './lifecycle-policy.js';

/** Every lifecycle policy a create request may leave out; null turns a policy off. */
export interface PolicyDefaults {
  /** Running-time TTL, ms; null: none. */
  timeoutMs: number | null;
  /** What the TTL does when it runs out. */
  timeoutAction: TimeoutAction;
  /** Pause after this long without activity, ms; null: never. */
  idleTimeoutMs: number | null;
  /** Delete this long after creation, ms; null: never. */
  maxAgeMs: number | null;
  /** Delete after staying paused this long, ms; null: keep paused sandboxes. */
  pausedRetentionMs: number | null;
  /** Keep only the newest N snapshots of the sandbox; null: all. */
  snapshotKeepLast: number | null;
}

/**
 * The server defaults when the operator sets none: persistent. No TTL, never deleted by a policy; a sandbox pauses
 * after 15 minutes without activity and stays paused until someone deletes it.
 */
export const BUILTIN_POLICY_DEFAULTS: Readonly<PolicyDefaults> = Object.freeze({
  timeoutMs: null,
  timeoutAction: 'delete',
  idleTimeoutMs: 900_000,
  maxAgeMs: null,
  pausedRetentionMs: null,
  snapshotKeepLast: null,
});

/** Where the value of one policy comes from. */
export type PolicySource = 'request' | 'server-default';

/** A create request's policy fields: undefined means "not given" (null is given: the policy is off). */
export type PolicyRequest = { [K in keyof PolicyDefaults]?: PolicyDefaults[K] | undefined };

/**
 * The policies of a new sandbox: each field the request gives wins, the others come from `defaults`.
 * @returns the policies and, per field, where its value comes from
 */
export function resolvePolicies(
  request: PolicyRequest,
  defaults: Readonly<PolicyDefaults>,
): { policies: PolicyDefaults; sources: Record<keyof PolicyDefaults, PolicySource> } {
  const keys = Object.keys(BUILTIN_POLICY_DEFAULTS) as Array<keyof PolicyDefaults>;
  const policies = { ...defaults } as PolicyDefaults;
  const sources = {} as Record<keyof PolicyDefaults, PolicySource>;
  for (const key of keys) {
    const given = request[key];
    if (given !== undefined) (policies as unknown as Record<string, unknown>)[key] = given;
    sources[key] = given === undefined ? 'server-default' : 'request';
  }
  return { policies, sources };
}

/**
 * The TTL deadline after a resume: the running-time clock stops while paused, so the deadline moves later by the
 * time spent paused (`nowMs - pausedAtMs`).
 * @returns epoch ms, or null when there is no TTL deadline
 */
export function resumedTimeoutAt(timeoutAtMs: number | null, pausedAtMs: number | null, nowMs: number): number | null {
  if (timeoutAtMs === null) return null;
  if (pausedAtMs === null || nowMs <= pausedAtMs) return timeoutAtMs;
  return timeoutAtMs + (nowMs - pausedAtMs);
}

/**
 * Server policy defaults from BURROW_DEFAULT_* variables, each falling back to {@link BUILTIN_POLICY_DEFAULTS}:
 * BURROW_DEFAULT_TIMEOUT_MS, BURROW_DEFAULT_TIMEOUT_ACTION (pause|stop|delete), BURROW_DEFAULT_IDLE_TIMEOUT_MS,
 * BURROW_DEFAULT_MAX_AGE_MS, BURROW_DEFAULT_PAUSED_RETENTION_MS, BURROW_DEFAULT_SNAPSHOT_KEEP_LAST. A duration
 * variable takes an integer of ms (1000 to 2_592_000_000) or `none` (off).
 * @throws RangeError naming the variable when a value is out of range or not a number
 */
export function policyDefaultsFromEnv(env: Record<string, string | undefined>): PolicyDefaults {
  const d = BUILTIN_POLICY_DEFAULTS;
  const duration = (name: string, fallback: number | null, min = 1000, max = 2_592_000_000): number | null => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    if (raw === 'none') return null;
    const n = Number(raw);
    if (!Number.isInteger(n) || n < min || n > max) {
      throw new RangeError(`${name} must be an integer from ${min} to ${max}, or none; got ${raw}`);
    }
    return n;
  };
  const action = env.BURROW_DEFAULT_TIMEOUT_ACTION ?? d.timeoutAction;
  if (action !== 'pause' && action !== 'stop' && action !== 'delete') {
    throw new RangeError(`BURROW_DEFAULT_TIMEOUT_ACTION must be pause, stop or delete; got ${action}`);
  }
  return {
    timeoutMs: duration('BURROW_DEFAULT_TIMEOUT_MS', d.timeoutMs),
    timeoutAction: action,
    idleTimeoutMs: duration('BURROW_DEFAULT_IDLE_TIMEOUT_MS', d.idleTimeoutMs),
    maxAgeMs: duration('BURROW_DEFAULT_MAX_AGE_MS', d.maxAgeMs),
    pausedRetentionMs: duration('BURROW_DEFAULT_PAUSED_RETENTION_MS', d.pausedRetentionMs),
    snapshotKeepLast: duration('BURROW_DEFAULT_SNAPSHOT_KEEP_LAST', d.snapshotKeepLast, 0, 1000),
  };
}
