/**
 * Sandbox state changes and their events commit in ONE transaction (SQLite, and PostgreSQL with
 * BURROW_TEST_PG_URL): the event is stored when the write returns, and a write whose event cannot be stored is not
 * made (a crash between the two, which used to lose the event, can no longer split them).
 */
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { ActorContext } from '../lifecycle/actor-context.js';
import { EventService } from '../services/event-service.js';
import { testSandboxRecord } from '../testing/store-records.js';
import { testDatabases } from '../testing/test-databases.js';
import { EventStore } from './event-store.js';
import type { SandboxRecord } from './sandbox-store.js';
import { openStore, type Store } from './store.js';

const NOW = '2026-11-29T08:00:00.000Z';

function record(id: string, state: SandboxRecord['state'] = 'creating'): SandboxRecord {
  return testSandboxRecord(id, { state });
}

describe.each(testDatabases('transition-events'))('state change and event in one transaction on %s', (_n, prepare) => {
  let store: Store;
  let cleanup: () => Promise<void>;
  let eventStore: EventStore;
  let service: EventService;
  const published: string[] = [];
  const typesOf = async (id: string) => (await eventStore.listForSandbox(id)).map((e) => e.type);

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
    service.onAppended = () => published.push('appended');
    store.sandboxes.onTransition = (trx, before, after) => service.onSandboxTransition(trx, before, after);
  });
  afterAll(async () => {
    await store?.close();
    await cleanup?.();
  });

  test('update, updateStates and remove store their event before they return (no flush)', async () => {
    await store.sandboxes.insert(record('sbx_a'));
    published.length = 0;
    const running = await store.sandboxes.update('t1', 'sbx_a', 1, { state: 'running' }, NOW);
    expect(running?.state).toBe('running');
    expect(await typesOf('sbx_a')).toEqual(['created']);
    expect(published).toEqual(['appended']);

    await store.sandboxes.insert({ ...record('sbx_b'), parentId: 'sbx_a' });
    await store.sandboxes.insert({ ...record('sbx_c'), parentId: 'sbx_a' });
    const children = await store.sandboxes.updateStates(
      [
        { tenantId: 't1', id: 'sbx_b', expectedVersion: 1 },
        { tenantId: 't1', id: 'sbx_c', expectedVersion: 1 },
      ],
      'running',
      NOW,
    );
    expect(children?.map((c) => c.state)).toEqual(['running', 'running']);
    expect([await typesOf('sbx_b'), await typesOf('sbx_c')]).toEqual([['forked'], ['forked']]);

    await store.sandboxes.remove('t1', 'sbx_c');
    expect(await typesOf('sbx_c')).toEqual(['forked', 'deleted']);
  });

  test('a fenced write stores no event', async () => {
    await store.sandboxes.insert(record('sbx_d'));
    expect(await store.sandboxes.update('t1', 'sbx_d', 7, { state: 'running' }, NOW)).toBeNull();
    expect(await typesOf('sbx_d')).toEqual([]);
  });

  test('when the event cannot be stored the state change is rolled back too (both or neither)', async () => {
    const hook = store.sandboxes.onTransition;
    await store.sandboxes.insert(record('sbx_e'));
    const crash = new Error('crash between the event and the commit');
    // The event is appended inside the transaction, then the "process dies" before the commit.
    store.sandboxes.onTransition = async (trx, before, after) => {
      await hook?.(trx, before, after);
      throw crash;
    };
    try {
      await expect(store.sandboxes.update('t1', 'sbx_e', 1, { state: 'running' }, NOW)).rejects.toBe(crash);
      await expect(
        store.sandboxes.updateStates([{ tenantId: 't1', id: 'sbx_e', expectedVersion: 1 }], 'running', NOW),
      ).rejects.toBe(crash);
      await expect(store.sandboxes.remove('t1', 'sbx_e')).rejects.toBe(crash);
    } finally {
      store.sandboxes.onTransition = hook;
    }
    const row = await store.sandboxes.get('t1', 'sbx_e');
    expect({ state: row?.state, version: row?.version }).toEqual({ state: 'creating', version: 1 });
    expect(await typesOf('sbx_e')).toEqual([]);
  });
});
