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
export type PolicySource = 'request' | 'tenant-default' | 'server-default';

/** A create request's policy fields: undefined means "not given" (null is given: the policy is off). */
export type PolicyRequest = { [K in keyof PolicyDefaults]?: PolicyDefaults[K] | undefined };

/** A tenant's defaults as an admin sets them: a field left out inherits the server default. */
export type TenantPolicySettings = PolicyRequest & {
  /** The longest `maxAgeMs` a request may ask for, ms; a request without one gets it. */
  maxAgeLimitMs?: number | undefined;
};

/** Why a request's policies break the tenant's limits. */
export interface PolicyLimitViolation {
  field: 'maxAgeMs';
  requested: number | null;
  limitMs: number;
}

/**
 * The policies of a new sandbox: each field the request gives wins, then the tenant's default, then the server's.
 * A tenant's `maxAgeLimitMs` caps `maxAgeMs`: a request above it (or asking for none) is a violation; a default
 * that is absent or above it becomes the limit.
 * @returns the policies, per field where its value comes from, and the violation (null when within limits)
 */
export function resolvePolicies(
  request: PolicyRequest,
  server: Readonly<PolicyDefaults>,
  tenant: Readonly<TenantPolicySettings> = {},
): {
  policies: PolicyDefaults;
  sources: Record<keyof PolicyDefaults, PolicySource>;
  violation: PolicyLimitViolation | null;
} {
  const keys = Object.keys(BUILTIN_POLICY_DEFAULTS) as Array<keyof PolicyDefaults>;
  const policies = { ...server } as PolicyDefaults;
  const sources = {} as Record<keyof PolicyDefaults, PolicySource>;
  const write = policies as unknown as Record<string, unknown>;
  for (const key of keys) {
    const given = request[key];
    const tenantValue = tenant[key];
    if (given !== undefined) write[key] = given;
    else if (tenantValue !== undefined) write[key] = tenantValue;
    sources[key] = given !== undefined ? 'request' : tenantValue !== undefined ? 'tenant-default' : 'server-default';
  }
  const limitMs = tenant.maxAgeLimitMs;
  let violation: PolicyLimitViolation | null = null;
  if (limitMs !== undefined && (policies.maxAgeMs === null || policies.maxAgeMs > limitMs)) {
    if (sources.maxAgeMs === 'request') violation = { field: 'maxAgeMs', requested: policies.maxAgeMs, limitMs };
    else {
      policies.maxAgeMs = limitMs;
      sources.maxAgeMs = 'tenant-default';
    }
  }
  return { policies, sources, violation };
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
