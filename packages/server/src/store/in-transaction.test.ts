/**
 * Store writes that carry an event (`also`, see in-transaction.ts) commit the change and the event in ONE
 * transaction (SQLite, and PostgreSQL with BURROW_TEST_PG_URL): when the transaction dies after the event is
 * appended (a kill between the two writes), neither is kept; when the write changes nothing, no event is appended.
 */
import type { EventType } from '@burrow/contract';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { ActorContext } from '../lifecycle/actor-context.js';
import { EventService } from '../services/event-service.js';
import { testSandboxRecord } from '../testing/store-records.js';
import { testDatabases } from '../testing/test-databases.js';
import { EventStore } from './event-store.js';
import type { InTransaction } from './in-transaction.js';
import type { SandboxRecord } from './sandbox-store.js';
import type { SnapshotRecord } from './snapshot-store.js';
import { openStore, type Store } from './store.js';

const NOW = '2026-11-29T08:00:00.000Z';

function sandbox(id: string): SandboxRecord {
  return testSandboxRecord(id);
}

function snapshot(id: string, sandboxId: string): SnapshotRecord {
  return {
    id,
    tenantId: 't1',
    name: null,
    sandboxId,
    template: 'base',
    templateId: 'tid',
    memory: false,
    state: 'creating',
    imageSizeBytes: 0,
    diskSizeBytes: 0,
    runtimeVersion: '',
    settings: { env: {}, cwd: '/root', cpuCount: 1, memoryMiB: 256, diskMiB: 100, autoResume: true },
    createdAt: NOW,
  };
}

describe.each(testDatabases('in-transaction'))('a write and its event in one transaction on %s', (_n, prepare) => {
  let store: Store;
  let cleanup: () => Promise<void>;
  let eventStore: EventStore;
  let service: EventService;
  const published: number[] = [];
  const crash = new Error('killed between the event and the commit');
  /** The event for `sandboxId`, appended in the write's transaction; then, with `die`, the "process dies". */
  const event = (
    sandboxId: string,
    snapshotId: string | null,
    die: boolean,
    type: EventType = 'expired',
  ): InTransaction => {
    const append = service.inTransaction({
      tenantId: 't1',
      type,
      sandboxId,
      snapshotId,
      message: 'test',
    });
    return async (trx) => {
      const publish = await append(trx);
      if (die) throw crash;
      return publish;
    };
  };
  const typesOf = async (id: string) => (await eventStore.listForSandbox(id)).map((e) => e.type);
  const snapshotRow = async (id: string) =>
    (await store.snapshots.listAcrossTenants()).find((s) => s.id === id) ?? null;

  beforeAll(async () => {
    const db = await prepare();
    cleanup = db.cleanup;
    store = openStore(db.url);
    await store.migrate();
    eventStore = new EventStore(store.db);
    service = new EventService({
      events: eventStore,
      actors: new ActorContext(),
      clock: { nowMs: () => Date.parse(NOW) },
      logger: pino({ level: 'silent' }),
    });
    service.onAppended = () => published.push(1);
    await store.sandboxes.insert(sandbox('sbx_1'));
  });
  afterAll(async () => {
    await store?.close();
    await cleanup?.();
  });

  test('sandbox update: killed after the event keeps neither; a fenced write appends none', async () => {
    const patch = { state: 'deleting' } as const;
    await expect(
      store.sandboxes.update('t1', 'sbx_1', 1, patch, NOW, { also: event('sbx_1', null, true) }),
    ).rejects.toBe(crash);
    expect((await store.sandboxes.get('t1', 'sbx_1'))?.state).toBe('running');
    expect(await typesOf('sbx_1')).toEqual([]);
    expect(
      await store.sandboxes.update('t1', 'sbx_1', 9, patch, NOW, { also: event('sbx_1', null, false) }),
    ).toBeNull();
    expect(await typesOf('sbx_1')).toEqual([]);
    published.length = 0;
    const done = await store.sandboxes.update('t1', 'sbx_1', 1, patch, NOW, { also: event('sbx_1', null, false) });
    expect(done?.state).toBe('deleting');
    expect(await typesOf('sbx_1')).toEqual(['expired']);
    expect(published).toEqual([1]);
  });

  test('snapshot markReady, setRetentionDeleteAt and remove: both or neither; nothing for a missing row', async () => {
    await store.snapshots.insert(snapshot('snp_1', 'sbx_1'));
    const sizes = { imageSizeBytes: 1, diskSizeBytes: 2, runtimeVersion: 'v' };
    await expect(
      store.snapshots.markReady('snp_1', sizes, { expiresAt: NOW, also: event('sbx_1', 'snp_1', true) }),
    ).rejects.toBe(crash);
    expect(await snapshotRow('snp_1')).toMatchObject({ state: 'creating', expiresAt: null });
    await store.snapshots.markReady('snp_1', sizes, {
      expiresAt: NOW,
      also: event('sbx_1', 'snp_1', false, 'snapshot_created'),
    });
    expect(await snapshotRow('snp_1')).toMatchObject({ state: 'ready', expiresAt: NOW });

    await expect(
      store.snapshots.setRetentionDeleteAt('snp_1', NOW, { also: event('sbx_1', 'snp_1', true) }),
    ).rejects.toBe(crash);
    expect((await snapshotRow('snp_1'))?.retentionDeleteAt).toBeNull();

    await expect(store.snapshots.remove('snp_1', { also: event('sbx_1', 'snp_1', true) })).rejects.toBe(crash);
    expect(await snapshotRow('snp_1')).not.toBeNull();
    await store.snapshots.remove('snp_1', { also: event('sbx_1', 'snp_1', false, 'snapshot_deleted') });
    expect(await snapshotRow('snp_1')).toBeNull();
    // Idempotent removal of a row that is gone reports nothing more.
    await store.snapshots.remove('snp_1', { also: event('sbx_1', 'snp_1', false, 'snapshot_deleted') });
    const snapshotEvents = (await eventStore.listForSandbox('sbx_1')).filter((e) => e.snapshotId === 'snp_1');
    expect(snapshotEvents.map((e) => e.type)).toEqual(['snapshot_created', 'snapshot_deleted']);
  });
});
