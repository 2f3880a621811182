import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { testSandboxRecord } from '../testing/store-records.js';
import { testDatabases } from '../testing/test-databases.js';
import { type QuotaDenial, QuotaExceededError, quotaDenial, UNLIMITED } from './quota-store.js';
import type { SandboxRecord } from './sandbox-store.js';
import { openStore, type Store } from './store.js';

const NOW = '2026-11-29T08:00:00.000Z';

function record(id: string, tenantId: string, diskMiB = 100): SandboxRecord {
  return testSandboxRecord(id, { tenantId, diskMiB, state: 'creating' });
}

describe('quotaDenial (pure)', () => {
  const usage = { running: 2, sandboxes: 5, diskBytes: 100, snapshots: 1 };
  test('unlimited fits', () => expect(quotaDenial('t', UNLIMITED, usage, { sandboxes: 1000 })).toBeNull());
  test('at the limit is refused', () =>
    expect(quotaDenial('t', { ...UNLIMITED, maxSandboxes: 5 }, usage, { sandboxes: 1 })).toMatchObject({
      limit: 'maxSandboxes',
      max: 5,
      used: 5,
    }));
  test('what is not needed is not checked', () =>
    expect(quotaDenial('t', { ...UNLIMITED, maxRunning: 0 }, usage, { snapshots: 1 })).toBeNull());
  test('disk counts bytes', () =>
    expect(quotaDenial('t', { ...UNLIMITED, maxDiskBytes: 150 }, usage, { diskBytes: 51 })?.limit).toBe(
      'maxDiskBytes',
    ));
});

describe.each(testDatabases('quota'))('atomic quotas on %s', (_name, prepare) => {
  let store: Store;
  let cleanup: () => Promise<void>;
  const denials: QuotaDenial[] = [];
  beforeAll(async () => {
    const db = await prepare();
    cleanup = db.cleanup;
    store = openStore(db.url);
    await store.migrate();
    store.sandboxes.quotas.onDenied = (d) => denials.push(d);
  });
  afterAll(async () => {
    await store?.close();
    await cleanup?.();
  });

  test('50 concurrent inserts against maxSandboxes 10 yield exactly 10', async () => {
    await store.sandboxes.quotas.setLimits('t1', { ...UNLIMITED, maxSandboxes: 10 }, NOW);
    const results = await Promise.allSettled(
      Array.from({ length: 50 }, (_, i) =>
        store.sandboxes.insert(record(`sbx_t1_${String(i).padStart(2, '0')}`, 't1')),
      ),
    );
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(10);
    const rejected = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(rejected).toHaveLength(40);
    expect(rejected.every((r) => r.reason instanceof QuotaExceededError)).toBe(true);
    expect((await store.sandboxes.quotas.usage('t1')).sandboxes).toBe(10);
    expect(denials.filter((d) => d.tenantId === 't1')).toHaveLength(40);
  });

  test('running and disk quotas; resuming takes a running slot; other tenants are not counted', async () => {
    await store.sandboxes.quotas.setLimits('t2', { ...UNLIMITED, maxRunning: 1, maxDiskBytes: 300 * 1024 * 1024 }, NOW);
    await store.sandboxes.insert(record('sbx_t2_a', 't2'));
    await store.sandboxes.insert({ ...record('sbx_t2_b', 't2'), state: 'paused' });
    await expect(store.sandboxes.insert(record('sbx_t2_c', 't2'))).rejects.toBeInstanceOf(QuotaExceededError);
    await expect(store.sandboxes.insert({ ...record('sbx_t2_d', 't2', 200), state: 'paused' })).rejects.toThrow(
      /maxDiskBytes/,
    );
    const paused = await store.sandboxes.get('t2', 'sbx_t2_b');
    await expect(
      store.sandboxes.update('t2', 'sbx_t2_b', paused?.version ?? 0, { state: 'resuming' }, NOW),
    ).rejects.toBeInstanceOf(QuotaExceededError);
    const running = await store.sandboxes.get('t2', 'sbx_t2_a');
    await store.sandboxes.update('t2', 'sbx_t2_a', running?.version ?? 0, { state: 'paused' }, NOW);
    expect(
      await store.sandboxes.update('t2', 'sbx_t2_b', paused?.version ?? 0, { state: 'resuming' }, NOW),
    ).not.toBeNull();
    await store.sandboxes.insert(record('sbx_t3_a', 't3'));
    expect(await store.sandboxes.quotas.usage('t2')).toEqual({
      running: 1,
      sandboxes: 2,
      diskBytes: 200 * 1024 * 1024,
      snapshots: 0,
      volumes: 0,
      volumeBytes: 0,
    });
  });
});
