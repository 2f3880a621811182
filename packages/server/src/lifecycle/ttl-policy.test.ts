import { describe, expect, test } from 'vitest';
import { decideSandbox, expiresAtFor, findOrphans } from './ttl-policy.js';

const NOW = Date.parse('2026-11-29T08:00:00.000Z');
const at = (offsetMs: number) => new Date(NOW + offsetMs).toISOString();

describe('expiresAtFor', () => {
  test('adds the TTL to now', () => expect(expiresAtFor(NOW, 60_000)).toBe(at(60_000)));
  test('null TTL never expires', () => expect(expiresAtFor(NOW, null)).toBeNull());
});

describe('decideSandbox (fixed clock)', () => {
  test.each([
    {
      name: 'running, not expired: observe, look again at expiry',
      state: 'running',
      expiresAt: at(1000),
      inFlight: false,
      action: 'observe',
      next: NOW + 1000,
    },
    {
      name: 'running, TTL due now: observe only (the PolicyEnforcer warns, then expires)',
      state: 'running',
      expiresAt: at(0),
      inFlight: false,
      action: 'observe',
      next: NOW,
    },
    {
      name: 'running, TTL long past: still never deleted here',
      state: 'running',
      expiresAt: at(-3_600_000),
      inFlight: false,
      action: 'observe',
      next: NOW - 3_600_000,
    },
    {
      name: 'error rows past TTL: nothing here',
      state: 'error',
      expiresAt: at(-1),
      inFlight: false,
      action: 'none',
      next: NOW - 1,
    },
    {
      name: 'error row without TTL: nothing',
      state: 'error',
      expiresAt: null,
      inFlight: false,
      action: 'none',
      next: null,
    },
    {
      name: 'no TTL: observe, no deadline',
      state: 'running',
      expiresAt: null,
      inFlight: false,
      action: 'observe',
      next: null,
    },
    {
      name: 'creating left by a crash',
      state: 'creating',
      expiresAt: at(1000),
      inFlight: false,
      action: 'finish-interrupted',
      next: null,
    },
    {
      name: 'deleting left by a failed delete',
      state: 'deleting',
      expiresAt: null,
      inFlight: false,
      action: 'finish-interrupted',
      next: null,
    },
    {
      name: 'creating in flight: leave it',
      state: 'creating',
      expiresAt: at(-1),
      inFlight: true,
      action: 'none',
      next: NOW,
    },
    { name: 'expired but busy: wait', state: 'running', expiresAt: at(-1), inFlight: true, action: 'none', next: NOW },
    {
      name: 'pausing left by a crash',
      state: 'pausing',
      expiresAt: null,
      inFlight: false,
      action: 'finish-transition',
      next: null,
    },
    {
      name: 'resuming left by a crash',
      state: 'resuming',
      expiresAt: at(-1),
      inFlight: false,
      action: 'finish-transition',
      next: null,
    },
    {
      name: 'stopping in flight: leave it',
      state: 'stopping',
      expiresAt: null,
      inFlight: true,
      action: 'none',
      next: NOW,
    },
    {
      name: 'paused past its TTL: nothing here',
      state: 'paused',
      expiresAt: at(-1),
      inFlight: false,
      action: 'none',
      next: NOW - 1,
    },
    {
      name: 'paused: nothing to observe',
      state: 'paused',
      expiresAt: at(1000),
      inFlight: false,
      action: 'none',
      next: NOW + 1000,
    },
  ] as const)('$name', ({ state, expiresAt, inFlight, action, next }) => {
    const decision = decideSandbox(NOW, { id: 'sbx_x', state, expiresAt }, { inFlight });
    expect(decision.action.type).toBe(action);
    expect(decision.nextCheckAtMs).toBe(next);
  });
});

describe('findOrphans', () => {
  test('host ids without a row, sorted', () => {
    expect(findOrphans(['sbx_c', 'sbx_a', 'sbx_b'], new Set(['sbx_b']))).toEqual(['sbx_a', 'sbx_c']);
  });
  test('none when every host id has a row', () =>
    expect(findOrphans(['sbx_a'], new Set(['sbx_a', 'sbx_z']))).toEqual([]));
});
