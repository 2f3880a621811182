import { describe, expect, test } from 'vitest';
import { deadlinesFor } from './lifecycle-policy.js';
import {
  BUILTIN_POLICY_DEFAULTS,
  type PolicyDefaults,
  policyDefaultsFromEnv,
  resolvePolicies,
  resumedTimeoutAt,
} from './policy-defaults.js';

const T0 = Date.parse('2026-11-29T12:00:00.000Z');
const S = 1000;
const M = 60 * S;
const DAY_MS = 24 * 60 * M;

describe('resolvePolicies', () => {
  test('no options: persistent (no TTL, no deletion), pause after 15 minutes idle, all from the server default', () => {
    const { policies, sources } = resolvePolicies({}, BUILTIN_POLICY_DEFAULTS);
    expect(policies).toEqual({
      timeoutMs: null,
      timeoutAction: 'delete',
      idleTimeoutMs: 15 * M,
      maxAgeMs: null,
      pausedRetentionMs: null,
      snapshotKeepLast: null,
    });
    expect(Object.values(sources)).toEqual(Array(6).fill('server-default'));
    // Fixed clock: a day later and idle, the only deadline is the idle pause; nothing ever deletes it.
    const running = deadlinesFor(
      policies,
      { state: 'running', createdAtMs: T0, timeoutAtMs: null, pausedAtMs: null, quarantined: false },
      { lastActivityMs: T0, busy: false },
    );
    expect(running.next).toEqual({ atMs: T0 + 15 * M, action: 'pause', reason: 'idle' });
    expect(running.deletion).toBeNull();
    const paused = deadlinesFor(
      policies,
      { state: 'paused', createdAtMs: T0, timeoutAtMs: null, pausedAtMs: T0 + 15 * M, quarantined: false },
      { lastActivityMs: T0, busy: false },
    );
    expect(paused.next).toBeNull();
  });

  test('request > tenant default > server default, each field on its own, with its source', () => {
    const { policies, sources, violation } = resolvePolicies({ idleTimeoutMs: 5 * M }, BUILTIN_POLICY_DEFAULTS, {
      idleTimeoutMs: 30 * M,
      pausedRetentionMs: DAY_MS,
    });
    expect(violation).toBeNull();
    expect(policies).toMatchObject({ idleTimeoutMs: 5 * M, pausedRetentionMs: DAY_MS, timeoutMs: null });
    expect(sources).toMatchObject({
      idleTimeoutMs: 'request',
      pausedRetentionMs: 'tenant-default',
      timeoutMs: 'server-default',
    });
  });

  test('a tenant maxAgeLimitMs: a request above it or asking for none is a violation; the default becomes it', () => {
    const tenant = { maxAgeLimitMs: DAY_MS };
    expect(resolvePolicies({ maxAgeMs: 2 * DAY_MS }, BUILTIN_POLICY_DEFAULTS, tenant).violation).toEqual({
      field: 'maxAgeMs',
      requested: 2 * DAY_MS,
      limitMs: DAY_MS,
    });
    expect(resolvePolicies({ maxAgeMs: null }, BUILTIN_POLICY_DEFAULTS, tenant).violation).toMatchObject({
      requested: null,
    });
    const within = resolvePolicies({ maxAgeMs: DAY_MS / 2 }, BUILTIN_POLICY_DEFAULTS, tenant);
    expect(within.violation).toBeNull();
    expect(within.policies.maxAgeMs).toBe(DAY_MS / 2);
    const absent = resolvePolicies({}, BUILTIN_POLICY_DEFAULTS, tenant);
    expect(absent.violation).toBeNull();
    expect(absent.policies.maxAgeMs).toBe(DAY_MS);
    expect(absent.sources.maxAgeMs).toBe('tenant-default');
  });

  test('a request field wins, null included (turns the default off); the rest keep the server default', () => {
    const operator: PolicyDefaults = { ...BUILTIN_POLICY_DEFAULTS, pausedRetentionMs: 7 * 24 * 60 * M };
    const { policies, sources } = resolvePolicies(
      { timeoutMs: 600_000, timeoutAction: 'delete', idleTimeoutMs: null },
      operator,
    );
    expect(policies.timeoutMs).toBe(600_000);
    expect(policies.idleTimeoutMs).toBeNull();
    expect(policies.pausedRetentionMs).toBe(7 * 24 * 60 * M);
    expect(sources).toMatchObject({
      timeoutMs: 'request',
      timeoutAction: 'request',
      idleTimeoutMs: 'request',
      pausedRetentionMs: 'server-default',
      maxAgeMs: 'server-default',
    });
  });
});

describe('resumedTimeoutAt (fixed clock)', () => {
  test('the TTL clock stops while paused: resume moves the deadline later by the pause', () => {
    // Created at T0 with 10 min of running time; paused at T0+4 min, resumed at T0+64 min: 6 min remain.
    expect(resumedTimeoutAt(T0 + 10 * M, T0 + 4 * M, T0 + 64 * M)).toBe(T0 + 70 * M);
    expect(resumedTimeoutAt(T0 + 10 * M, T0 + 4 * M, T0 + 64 * M + 500)).toBe(T0 + 70 * M + 500);
  });
  test('no TTL, never paused, or a clock behind the pause: unchanged', () => {
    expect(resumedTimeoutAt(null, T0, T0 + M)).toBeNull();
    expect(resumedTimeoutAt(T0 + M, null, T0 + 5 * M)).toBe(T0 + M);
    expect(resumedTimeoutAt(T0 + M, T0, T0 - S)).toBe(T0 + M);
  });
});

describe('policyDefaultsFromEnv', () => {
  test('nothing set: the built-in persistent defaults', () => {
    expect(policyDefaultsFromEnv({})).toEqual(BUILTIN_POLICY_DEFAULTS);
  });
  test('each variable sets its policy; none turns one off', () => {
    expect(
      policyDefaultsFromEnv({
        BURROW_DEFAULT_TIMEOUT_MS: '3600000',
        BURROW_DEFAULT_TIMEOUT_ACTION: 'pause',
        BURROW_DEFAULT_IDLE_TIMEOUT_MS: 'none',
        BURROW_DEFAULT_MAX_AGE_MS: '86400000',
        BURROW_DEFAULT_PAUSED_RETENTION_MS: '604800000',
        BURROW_DEFAULT_SNAPSHOT_KEEP_LAST: '0',
      }),
    ).toEqual({
      timeoutMs: 3_600_000,
      timeoutAction: 'pause',
      idleTimeoutMs: null,
      maxAgeMs: 86_400_000,
      pausedRetentionMs: 604_800_000,
      snapshotKeepLast: 0,
    });
  });
  test('bad values name the variable', () => {
    expect(() => policyDefaultsFromEnv({ BURROW_DEFAULT_IDLE_TIMEOUT_MS: '10' })).toThrow(
      /BURROW_DEFAULT_IDLE_TIMEOUT_MS must be an integer from 1000/,
    );
    expect(() => policyDefaultsFromEnv({ BURROW_DEFAULT_TIMEOUT_ACTION: 'explode' })).toThrow(
      /BURROW_DEFAULT_TIMEOUT_ACTION must be pause, stop or delete/,
    );
  });
});
