import { describe, expect, test } from 'vitest';
import {
  type ActivityFacts,
  type Deadlines,
  deadlinesFor,
  decidePolicyStep,
  extendedTimeoutAt,
  type LifecyclePolicy,
  type PolicyFacts,
  snapshotRetentionSteps,
} from './lifecycle-policy.js';

const NOW = Date.parse('2026-11-29T08:00:00.000Z');
const S = 1000;
const M = 60 * S;

const OFF: LifecyclePolicy = {
  timeoutMs: null,
  timeoutAction: 'delete',
  idleTimeoutMs: null,
  maxAgeMs: null,
  pausedRetentionMs: null,
};
const RUNNING: PolicyFacts = {
  state: 'running',
  createdAtMs: NOW - 10 * M,
  timeoutAtMs: null,
  pausedAtMs: null,
  quarantined: false,
};
const QUIET: ActivityFacts = { lastActivityMs: NOW - 2 * M, busy: false };

describe('deadlinesFor (fixed clock)', () => {
  test.each<{
    name: string;
    policy: Partial<LifecyclePolicy>;
    facts?: Partial<PolicyFacts>;
    activity?: Partial<ActivityFacts>;
    next: { atMs: number; action: string; reason: string } | null;
    idleAtMs?: number | null;
    deletionAtMs?: number | null;
  }>([
    { name: 'no policy: no deadline', policy: {}, next: null, idleAtMs: null, deletionAtMs: null },
    {
      name: 'timeout delete',
      policy: { timeoutMs: 60 * M },
      facts: { timeoutAtMs: NOW + 5 * M },
      next: { atMs: NOW + 5 * M, action: 'delete', reason: 'timeout' },
      deletionAtMs: NOW + 5 * M,
    },
    {
      name: 'timeout pause on a running sandbox',
      policy: { timeoutMs: M, timeoutAction: 'pause' },
      facts: { timeoutAtMs: NOW + M },
      next: { atMs: NOW + M, action: 'pause', reason: 'timeout' },
      deletionAtMs: null,
    },
    {
      name: 'timeout pause does not apply to a paused sandbox',
      policy: { timeoutMs: M, timeoutAction: 'pause' },
      facts: { state: 'paused', timeoutAtMs: NOW - M, pausedAtMs: NOW - M },
      next: null,
    },
    {
      name: 'timeout stop does not apply to a paused sandbox (its running clock stops)',
      policy: { timeoutMs: M, timeoutAction: 'stop' },
      facts: { state: 'paused', timeoutAtMs: NOW - M, pausedAtMs: NOW - M },
      next: null,
    },
    {
      name: 'timeout delete does not apply to a paused sandbox; paused retention governs it',
      policy: { timeoutMs: M, timeoutAction: 'delete', pausedRetentionMs: 60 * M },
      facts: { state: 'paused', timeoutAtMs: NOW - M, pausedAtMs: NOW - 2 * M },
      next: { atMs: NOW + 58 * M, action: 'delete', reason: 'paused-retention' },
      deletionAtMs: NOW + 58 * M,
    },
    {
      name: 'timeout stop does not apply to a stopped sandbox',
      policy: { timeoutMs: M, timeoutAction: 'stop' },
      facts: { state: 'stopped', timeoutAtMs: NOW - M },
      next: null,
    },
    {
      name: 'idle: last activity + idle timeout, action pause',
      policy: { idleTimeoutMs: 5 * M },
      next: { atMs: NOW + 3 * M, action: 'pause', reason: 'idle' },
      idleAtMs: NOW + 3 * M,
    },
    {
      name: 'idle: a busy sandbox (running command, open stream) has no idle deadline',
      policy: { idleTimeoutMs: 5 * M },
      activity: { busy: true, lastActivityMs: NOW - 60 * M },
      next: null,
      idleAtMs: null,
    },
    {
      name: 'idle: a paused sandbox is not idle-paused again',
      policy: { idleTimeoutMs: M },
      facts: { state: 'paused', pausedAtMs: NOW - M },
      next: null,
      idleAtMs: null,
    },
    {
      name: 'max age: created + maxAge, delete, also while paused',
      policy: { maxAgeMs: 20 * M },
      facts: { state: 'paused', pausedAtMs: NOW - M },
      next: { atMs: NOW + 10 * M, action: 'delete', reason: 'max-age' },
      deletionAtMs: NOW + 10 * M,
    },
    {
      name: 'paused retention counts from the pause',
      policy: { pausedRetentionMs: 30 * M },
      facts: { state: 'paused', pausedAtMs: NOW - 10 * M },
      next: { atMs: NOW + 20 * M, action: 'delete', reason: 'paused-retention' },
    },
    {
      name: 'paused retention does not apply while running',
      policy: { pausedRetentionMs: M },
      next: null,
    },
    {
      name: 'earliest wins: idle before timeout',
      policy: { idleTimeoutMs: 3 * M, timeoutMs: 60 * M },
      facts: { timeoutAtMs: NOW + 50 * M },
      next: { atMs: NOW + M, action: 'pause', reason: 'idle' },
      idleAtMs: NOW + M,
      deletionAtMs: NOW + 50 * M,
    },
    {
      name: 'tie: delete wins over pause',
      policy: { idleTimeoutMs: 3 * M, maxAgeMs: 11 * M },
      next: { atMs: NOW + M, action: 'delete', reason: 'max-age' },
    },
    {
      name: 'quarantined: no policy touches it',
      policy: { timeoutMs: M, maxAgeMs: M, idleTimeoutMs: M },
      facts: { quarantined: true, timeoutAtMs: NOW - M },
      next: null,
      idleAtMs: null,
      deletionAtMs: null,
    },
    {
      name: 'transitional state: nothing until it settles',
      policy: { timeoutMs: M },
      facts: { state: 'pausing', timeoutAtMs: NOW - M },
      next: null,
    },
    {
      name: 'error rows still expire',
      policy: { timeoutMs: M },
      facts: { state: 'error', timeoutAtMs: NOW - M },
      next: { atMs: NOW - M, action: 'delete', reason: 'timeout' },
    },
  ])('$name', ({ policy, facts, activity, next, idleAtMs, deletionAtMs }) => {
    const d = deadlinesFor({ ...OFF, ...policy }, { ...RUNNING, ...facts }, { ...QUIET, ...activity });
    expect(d.next).toEqual(next);
    if (idleAtMs !== undefined) expect(d.idleAtMs).toBe(idleAtMs);
    if (deletionAtMs !== undefined) expect(d.deletion?.atMs ?? null).toBe(deletionAtMs);
  });
});

describe('decidePolicyStep (fixed clock, warning 60 s)', () => {
  const WARN = M;
  const del = (atMs: number): Deadlines => ({
    next: { atMs, action: 'delete', reason: 'timeout' },
    idleAtMs: null,
    deletion: { atMs, action: 'delete', reason: 'timeout' },
  });
  const none = { warnedForMs: null, warnedAtMs: null };

  test('deletion far off: nothing, look again when the warning is due', () => {
    const r = decidePolicyStep(NOW, del(NOW + 10 * M), none, WARN);
    expect(r.step.type).toBe('none');
    expect(r.nextCheckAtMs).toBe(NOW + 9 * M);
    expect(r.deleteAtMs).toBe(NOW + 10 * M);
  });
  test('inside the warning window: warn first', () => {
    const r = decidePolicyStep(NOW, del(NOW + 30 * S), none, WARN);
    expect(r.step).toMatchObject({ type: 'warn', deleteAtMs: NOW + 60 * S });
  });
  test('past the deadline without a warning: warn, never delete', () => {
    const r = decidePolicyStep(NOW, del(NOW - 10 * M), none, WARN);
    expect(r.step.type).toBe('warn');
  });
  test('warned on time: delete at the deadline', () => {
    const r = decidePolicyStep(NOW, del(NOW), { warnedForMs: NOW, warnedAtMs: NOW - WARN }, WARN);
    expect(r.step.type).toBe('act');
  });
  test('warned late (after a restart): the full warning time passes first', () => {
    const warnedAtMs = NOW - 10 * S;
    const r = decidePolicyStep(NOW, del(NOW - 5 * M), { warnedForMs: NOW - 5 * M, warnedAtMs }, WARN);
    expect(r.step.type).toBe('none');
    expect(r.deleteAtMs).toBe(warnedAtMs + WARN);
    expect(r.nextCheckAtMs).toBe(warnedAtMs + WARN);
  });
  test('a warning for an older deadline does not count after an extension', () => {
    const r = decidePolicyStep(NOW, del(NOW + 10 * S), { warnedForMs: NOW - M, warnedAtMs: NOW - 2 * M }, WARN);
    expect(r.step.type).toBe('warn');
  });
  test('a pause due now comes before a later deletion', () => {
    const d: Deadlines = {
      next: { atMs: NOW - S, action: 'pause', reason: 'idle' },
      idleAtMs: NOW - S,
      deletion: { atMs: NOW + 10 * M, action: 'delete', reason: 'max-age' },
    };
    expect(decidePolicyStep(NOW, d, none, WARN).step).toMatchObject({ type: 'act', deadline: { action: 'pause' } });
  });
  test('a later pause does not hide a deletion warning that is due', () => {
    const d: Deadlines = {
      next: { atMs: NOW + 10 * S, action: 'pause', reason: 'idle' },
      idleAtMs: NOW + 10 * S,
      deletion: { atMs: NOW + 30 * S, action: 'delete', reason: 'max-age' },
    };
    expect(decidePolicyStep(NOW, d, none, WARN).step.type).toBe('warn');
  });
  test('no deadlines: nothing, no next look', () => {
    const r = decidePolicyStep(NOW, { next: null, idleAtMs: null, deletion: null }, none, WARN);
    expect(r).toEqual({ step: { type: 'none' }, deleteAtMs: null, nextCheckAtMs: null });
  });
});

describe('extendedTimeoutAt', () => {
  test('extends from now', () => expect(extendedTimeoutAt(NOW, M, NOW + S, { allowShorten: false })).toBe(NOW + M));
  test('never shortens silently', () =>
    expect(extendedTimeoutAt(NOW, S, NOW + M, { allowShorten: false })).toBe(NOW + M));
  test('shortens when asked to', () =>
    expect(extendedTimeoutAt(NOW, S, NOW + M, { allowShorten: true })).toBe(NOW + S));
  test('null turns the TTL off', () =>
    expect(extendedTimeoutAt(NOW, null, NOW + M, { allowShorten: false })).toBeNull());
});

describe('snapshotRetentionSteps', () => {
  const W = 60 * S;
  const snap = (
    id: string,
    sandboxId: string,
    ageMs: number,
    expiresInMs: number | null,
    deleteInMs: number | null = null,
  ) => ({
    id,
    sandboxId,
    createdAtMs: NOW - ageMs,
    expiresAtMs: expiresInMs === null ? null : NOW + expiresInMs,
    deleteAtMs: deleteInMs === null ? null : NOW + deleteInMs,
  });
  test('past expiresAt without a warning: warn now, delete a full warning time later', () => {
    const r = snapshotRetentionSteps(NOW, [snap('a', 's', 3 * M, -S), snap('b', 's', 2 * M, 5 * M)], new Map(), W);
    expect(r.steps).toEqual([{ type: 'warn', id: 'a', reason: 'expires-at', deleteAtMs: NOW + W }]);
    expect(r.nextCheckAtMs).toBe(NOW + W);
  });
  test('the warning comes warningMs before expiresAt, the deletion at expiresAt', () => {
    expect(snapshotRetentionSteps(NOW, [snap('a', 's', M, 2 * W)], new Map(), W)).toEqual({
      steps: [],
      nextCheckAtMs: NOW + W,
    });
    expect(snapshotRetentionSteps(NOW, [snap('a', 's', M, W / 2)], new Map(), W).steps).toEqual([
      { type: 'warn', id: 'a', reason: 'expires-at', deleteAtMs: NOW + W },
    ]);
    expect(snapshotRetentionSteps(NOW, [snap('a', 's', M, -S, -1)], new Map(), W).steps).toEqual([
      { type: 'delete', id: 'a', reason: 'expires-at' },
    ]);
    // Warned, but expiresAt was moved later inside the warning window: the later time wins.
    expect(snapshotRetentionSteps(NOW, [snap('a', 's', M, S, -1)], new Map(), W)).toEqual({
      steps: [],
      nextCheckAtMs: NOW + S,
    });
  });
  test('keep-last-N per sandbox: the excess is warned, then deleted after the warning time', () => {
    const facts = [
      snap('a', 's', 3 * M, null),
      snap('b', 's', 2 * M, null),
      snap('c', 's', M, null),
      snap('x', 't', 9 * M, null),
    ];
    expect(snapshotRetentionSteps(NOW, facts, new Map([['s', 2]]), W).steps).toEqual([
      { type: 'warn', id: 'a', reason: 'keep-last', deleteAtMs: NOW + W },
    ]);
    const warned = [snap('a', 's', 3 * M, null, W), ...facts.slice(1)];
    expect(snapshotRetentionSteps(NOW, warned, new Map([['s', 2]]), W).steps).toEqual([]);
    expect(snapshotRetentionSteps(NOW + W, warned, new Map([['s', 2]]), W).steps).toEqual([
      { type: 'delete', id: 'a', reason: 'keep-last' },
    ]);
  });
  test('keep-last 0 warns about every snapshot of that sandbox', () => {
    const r = snapshotRetentionSteps(
      NOW,
      [snap('a', 's', 3 * M, null), snap('b', 's', 2 * M, null)],
      new Map([['s', 0]]),
      W,
    );
    expect(r.steps.map((e) => [e.type, e.id])).toEqual([
      ['warn', 'a'],
      ['warn', 'b'],
    ]);
  });
  test('a warned snapshot that is no longer due has its warning cleared', () => {
    expect(snapshotRetentionSteps(NOW, [snap('a', 's', M, null, W)], new Map(), W).steps).toEqual([
      { type: 'clear', id: 'a' },
    ]);
    expect(snapshotRetentionSteps(NOW, [snap('a', 's', M, 10 * W, W)], new Map(), W).steps).toEqual([
      { type: 'clear', id: 'a' },
    ]);
  });
});
