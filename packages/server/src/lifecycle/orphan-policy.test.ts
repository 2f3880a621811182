import { describe, expect, test } from 'vitest';
import { orphansDue, retryDelayMs } from './orphan-policy.js';

const GRACE = 60_000;
const T0 = 1_700_000_000_000;

describe('orphansDue', () => {
  test.each([
    {
      name: 'a new unowned id is found, not due',
      now: T0,
      host: ['sbx_a'],
      owned: [],
      seen: {},
      busy: [],
      expected: { newlySeen: ['sbx_a'], due: [], firstSeenMs: { sbx_a: T0 } },
    },
    {
      name: 'an owned id is never tracked',
      now: T0,
      host: ['sbx_a', 'sbx_b'],
      owned: ['sbx_b'],
      seen: {},
      busy: [],
      expected: { newlySeen: ['sbx_a'], due: [], firstSeenMs: { sbx_a: T0 } },
    },
    {
      name: 'one ms before the grace runs out: not due',
      now: T0 + GRACE - 1,
      host: ['sbx_a'],
      owned: [],
      seen: { sbx_a: T0 },
      busy: [],
      expected: { newlySeen: [], due: [], firstSeenMs: { sbx_a: T0 } },
    },
    {
      name: 'the grace ran out: due',
      now: T0 + GRACE,
      host: ['sbx_a'],
      owned: [],
      seen: { sbx_a: T0 },
      busy: [],
      expected: { newlySeen: [], due: ['sbx_a'], firstSeenMs: { sbx_a: T0 } },
    },
    {
      name: 'a busy id (create in flight, row not written yet) is never due and restarts its grace',
      now: T0 + 10 * GRACE,
      host: ['sbx_a'],
      owned: [],
      seen: { sbx_a: T0 },
      busy: ['sbx_a'],
      expected: { newlySeen: [], due: [], firstSeenMs: {} },
    },
    {
      name: 'a busy id seen for the first time (a create or delete spanning the pass) is not a leak found',
      now: T0,
      host: ['sbx_a', 'sbx_b'],
      owned: [],
      seen: {},
      busy: ['sbx_a'],
      expected: { newlySeen: ['sbx_b'], due: [], firstSeenMs: { sbx_b: T0 } },
    },
    {
      name: 'an id that got its row is dropped from tracking',
      now: T0 + GRACE,
      host: ['sbx_a'],
      owned: ['sbx_a'],
      seen: { sbx_a: T0 },
      busy: [],
      expected: { newlySeen: [], due: [], firstSeenMs: {} },
    },
    {
      name: 'an id gone from the host is dropped; found again later it starts over',
      now: T0 + GRACE,
      host: ['sbx_b'],
      owned: [],
      seen: { sbx_a: T0 },
      busy: [],
      expected: { newlySeen: ['sbx_b'], due: [], firstSeenMs: { sbx_b: T0 + GRACE } },
    },
    {
      name: 'grace 0 reaps on first sight',
      now: T0,
      host: ['sbx_b', 'sbx_a', 'sbx_a'],
      owned: [],
      seen: {},
      busy: [],
      grace: 0,
      expected: { newlySeen: ['sbx_a', 'sbx_b'], due: ['sbx_a', 'sbx_b'], firstSeenMs: { sbx_a: T0, sbx_b: T0 } },
    },
  ])('$name', ({ now, host, owned, seen, busy, expected, grace }) => {
    const decision = orphansDue(now, host, new Set(owned), new Map(Object.entries(seen)), grace ?? GRACE, (id) =>
      busy.includes(id),
    );
    expect({ ...decision, firstSeenMs: Object.fromEntries(decision.firstSeenMs) }).toEqual(expected);
  });
});

test('an id busy in one pass and idle and unowned in the next is found then, and its grace starts then', () => {
  const busyPass = orphansDue(T0, ['sbx_a'], new Set(), new Map([['sbx_a', T0 - 10 * GRACE]]), GRACE, () => true);
  expect(busyPass.newlySeen).toEqual([]);
  const idlePass = orphansDue(T0 + GRACE, ['sbx_a'], new Set(), busyPass.firstSeenMs, GRACE, () => false);
  expect(idlePass.newlySeen).toEqual(['sbx_a']);
  expect(idlePass.due).toEqual([]);
  expect(Object.fromEntries(idlePass.firstSeenMs)).toEqual({ sbx_a: T0 + GRACE });
});

describe('retryDelayMs', () => {
  test.each([
    [0, 0],
    [1, 1_000],
    [2, 2_000],
    [5, 16_000],
    [9, 256_000],
    [10, 300_000],
    [1_000, 300_000],
  ])('after %i failures: %i ms', (failures, expected) => {
    expect(retryDelayMs(failures)).toBe(expected);
  });
  test('custom base and cap', () => {
    expect(retryDelayMs(3, { baseMs: 10, maxMs: 25 })).toBe(25);
    expect(retryDelayMs(2, { baseMs: 10, maxMs: 25 })).toBe(20);
  });
});
