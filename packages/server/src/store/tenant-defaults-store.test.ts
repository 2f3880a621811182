import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { testSandboxRecord } from '../testing/store-records.js';
import { testDatabases } from '../testing/test-databases.js';
import { openStore, type Store } from './store.js';

const NOW = '2026-11-29T08:00:00.000Z';

describe.each(testDatabases('tenantdefaults'))('tenant policy defaults on %s', (_name, prepare) => {
  let store: Store;
  let cleanup: () => Promise<void>;
  beforeAll(async () => {
    const db = await prepare();
    cleanup = db.cleanup;
    store = openStore(db.url);
    await store.migrate();
  });
  afterAll(async () => {
    await store?.close();
    await cleanup?.();
  });

  test('set, read back (null kept apart from left out), replace, and clear', async () => {
    expect(await store.tenantDefaults.get('t1')).toEqual({});
    await store.tenantDefaults.set('t1', { idleTimeoutMs: 300_000, pausedRetentionMs: null }, NOW);
    expect(await store.tenantDefaults.get('t1')).toEqual({ idleTimeoutMs: 300_000, pausedRetentionMs: null });
    expect(await store.tenantDefaults.get('t2')).toEqual({});
    await store.tenantDefaults.set('t1', { maxAgeLimitMs: 86_400_000 }, NOW);
    expect(await store.tenantDefaults.get('t1')).toEqual({ maxAgeLimitMs: 86_400_000 });
    await store.tenantDefaults.set('t1', {}, NOW);
    expect(await store.tenantDefaults.get('t1')).toEqual({});
  });

  test('the upgrade adds the table and leaves existing sandboxes with their explicit policies', async () => {
    const old = testSandboxRecord('sbx_gov0upgrade0000000a', { tenantId: 'up', state: 'running' });
    old.timeoutMs = 3_600_000;
    old.expiresAt = '2026-11-29T09:00:00.000Z';
    old.lifecycle = { ...old.lifecycle, timeoutAction: 'delete', idleTimeoutMs: null } as typeof old.lifecycle;
    await store.sandboxes.insert(old);
    // The database as it was before this migration: no table, no record of the migration.
    await store.db.schema.dropTable('tenant_policy_defaults').execute();
    await store.db.schema.alterTable('sandboxes').dropColumn('policy_sources').execute();
    await sql`delete from kysely_migration where name = '2400_tenant_policy_defaults'`.execute(store.db);
    await store.migrate();
    expect(await store.tenantDefaults.get('up')).toEqual({});
    const after = await store.sandboxes.get('up', old.id);
    expect(after).toMatchObject({ timeoutMs: 3_600_000, expiresAt: '2026-11-29T09:00:00.000Z' });
    expect(after?.lifecycle).toMatchObject({ timeoutAction: 'delete', idleTimeoutMs: null, pausedRetentionMs: null });
    // No recorded sources on rows from before: the view leaves them out rather than guess.
    expect(after?.lifecycle?.policySources).toBeNull();
  });
});
