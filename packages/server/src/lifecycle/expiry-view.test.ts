import { describe, expect, it } from 'vitest';
import { DEFAULT_LIFECYCLE, type SandboxLifecycle, type SandboxRecord } from '../store/sandbox-store.js';
import { deadlinesOf, effectiveDeletionMs, lifecycleView } from './expiry-view.js';
import { decidePolicyStep } from './lifecycle-policy.js';

const T0 = Date.parse('2026-11-29T10:00:00.000Z');
const WARNING_MS = 300_000;
const iso = (ms: number) => new Date(ms).toISOString();

/** A running sandbox created at T0 with a TTL of `timeoutMs` that deletes it. */
function record(timeoutMs: number, lifecycle: Partial<SandboxLifecycle> = {}): SandboxRecord {
  return {
    id: 'sbx_00000000000000000000',
    tenantId: 'default',
    template: 'base',
    templateId: 't',
    state: 'running',
    conditions: [],
    env: {},
    labels: {},
    cwd: '/root',
    hostname: 'h',
    cpuCount: 1,
    memoryMiB: 512,
    diskMiB: 2048,
    timeoutMs,
    expiresAt: iso(T0 + timeoutMs),
    createdAt: iso(T0),
    updatedAt: iso(T0),
    version: 1,
    desiredState: 'running',
    autoResume: true,
    parentId: null,
    snapshotId: null,
    lifecycle: { ...DEFAULT_LIFECYCLE, ...lifecycle },
  };
}

describe('expiresAt of a deletion by policy (fixed clock)', () => {
  it('a TTL shorter than the warning time shows the deletion when it happens, not at the bare TTL', () => {
    // Found by a new user: create with timeoutMs 2000 answered expiresAt = createdAt + 2 s, yet the sandbox
    // lived 5 minutes more (the deletion waits for its warning).
    const r = record(2000);
    const view = lifecycleView(r, null, 0, WARNING_MS, T0);
    expect(view.expiresAt).toBe(iso(T0 + WARNING_MS));
    expect(view.expiry).toEqual({ at: iso(T0 + WARNING_MS), action: 'delete', reason: 'timeout' });
    expect(view.timeoutAt).toBe(iso(T0 + 2000));
    // The policy agrees: the deletion it plans is the one shown.
    const deadlines = deadlinesOf(r, null, 0);
    const decision = decidePolicyStep(T0, deadlines, { warnedForMs: null, warnedAtMs: null }, WARNING_MS);
    expect(decision.deleteAtMs).toBe(T0 + WARNING_MS);
  });

  it('once warned, the deletion is shown at warning + warning time whatever the clock says', () => {
    const r = record(2000, { expiryWarnedFor: iso(T0 + 2000), expiryWarnedAt: iso(T0 + 1000) });
    expect(effectiveDeletionMs(r, T0 + 2000, WARNING_MS, T0 + 60_000)).toBe(T0 + 1000 + WARNING_MS);
  });

  it('a deadline beyond the warning window is shown as it is', () => {
    const r = record(3_600_000);
    expect(lifecycleView(r, null, 0, WARNING_MS, T0).expiresAt).toBe(iso(T0 + 3_600_000));
  });

  it('without a clock or a warning time the bare deadline is shown (as before)', () => {
    const r = record(2000);
    expect(lifecycleView(r, null, 0, WARNING_MS, null).expiresAt).toBe(iso(T0 + 2000));
    expect(lifecycleView(r, null, 0, null, T0).expiresAt).toBe(iso(T0 + 2000));
  });
});
