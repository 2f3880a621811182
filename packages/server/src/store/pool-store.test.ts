import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { testSandboxRecord } from '../testing/store-records.js';
import { testDatabases } from '../testing/test-databases.js';
import { POOL_TENANT, type PoolClaim, type PoolSpec } from './pool-store.js';
import type { SandboxRecord } from './sandbox-store.js';
import { openStore, type Store } from './store.js';

const dialects = testDatabases('pool_store');

const POOL_SIZE = 5;
const CALLERS = 40;
const spec: PoolSpec = { templateId: 'tid-pool', cpuCount: 1, memoryMiB: 512, diskMiB: 2048 };

function poolRow(id: string, state: SandboxRecord['state'] = 'running'): SandboxRecord {
  return testSandboxRecord(id, {
    tenantId: POOL_TENANT,
    templateId: spec.templateId,
    state,
    hostname: id.replace('_', '-'),
    cpuCount: spec.cpuCount,
    memoryMiB: spec.memoryMiB,
    diskMiB: spec.diskMiB,
    createdAt: '2026-01-01T00:00:00.000Z',
  });
}

function claimFor(tenantId: string, n: number): PoolClaim {
  return {
    tenantId,
    template: 'base',
    env: { N: String(n) },
    labels: { caller: String(n) },
    cwd: '/tmp',
    timeoutMs: 60_000,
    expiresAt: '2026-01-01T01:00:00.000Z',
    autoResume: false,
    at: '2026-01-01T00:30:00.000Z',
  };
}

describe.each(dialects)('pool store on %s', (dialect, prepare) => {
  // PostgreSQL: two connection pools, so claims really run concurrently. SQLite: one connection, as in the server
  // (a second writer connection to the file would only meet SQLITE_BUSY).
  let a: Store;
  let b: Store;
  let cleanup: () => Promise<void>;
  const ids = Array.from({ length: POOL_SIZE }, (_, i) => `sbx_pooltest${String(i).padStart(8, '0')}`);
  const tenants = ['pool-t1', 'pool-t2'];

  const wipe = async () => {
    await a.db.deleteFrom('sandbox_labels').where('sandbox_id', 'in', ids).execute();
    await a.db.deleteFrom('sandboxes').where('id', 'in', ids).execute();
  };

  beforeAll(async () => {
    const p = await prepare();
    cleanup = p.cleanup;
    a = openStore(p.url);
    await a.migrate();
    b = dialect === 'postgres' ? openStore(p.url) : a;
    await wipe();
  });
  afterAll(async () => {
    if (a) await wipe().catch(() => undefined);
    await a?.close();
    if (b !== a) await b?.close();
    await cleanup?.();
  });

  test(`${CALLERS} concurrent claims against a pool of ${POOL_SIZE}: each pool sandbox handed out once`, async () => {
    for (const id of ids) await a.sandboxes.insert(poolRow(id));
    const results = await Promise.all(
      Array.from({ length: CALLERS }, (_, n) =>
        (n % 2 === 0 ? a : b).pool.claim(spec, claimFor(tenants[n % 2] as string, n)),
      ),
    );
    const won = results.filter((r): r is SandboxRecord => r !== null);
    expect(won).toHaveLength(POOL_SIZE);
    expect(new Set(won.map((r) => r.id)).size).toBe(POOL_SIZE);
    expect(new Set(won.map((r) => r.id))).toEqual(new Set(ids));
    // Each row belongs to exactly the caller that won it, with that caller's data.
    for (const row of won) {
      const n = Number(row.env.N);
      expect(row.tenantId).toBe(tenants[n % 2]);
      expect(row.labels).toEqual({ caller: String(n) });
      expect(row.cwd).toBe('/tmp');
      expect(row.autoResume).toBe(false);
      expect(row.createdAt).toBe('2026-01-01T00:30:00.000Z');
      expect(row.version).toBe(2);
      const listed = await a.sandboxes.list(row.tenantId, { labels: [['caller', String(n)]], limit: 10 });
      expect(listed.map((r) => r.id)).toEqual([row.id]);
    }
    expect(await a.pool.members()).toHaveLength(0);
    await wipe();
  });

  test('only ready rows of the same spec are claimed; pool rows are in no tenant list', async () => {
    await a.sandboxes.insert(poolRow(ids[0] as string, 'creating'));
    await a.sandboxes.insert({ ...poolRow(ids[1] as string), memoryMiB: 1024 });
    await a.sandboxes.insert({ ...poolRow(ids[2] as string), templateId: 'another-template' });
    expect(await a.pool.claim(spec, claimFor('pool-t1', 0))).toBeNull();
    expect(await a.sandboxes.list('pool-t1', { labels: [], limit: 10 })).toEqual([]);
    expect((await a.pool.members()).map((m) => m.id).sort()).toEqual(ids.slice(0, 3));
    const big = await a.pool.claim({ ...spec, memoryMiB: 1024 }, claimFor('pool-t1', 0));
    expect(big?.id).toBe(ids[1]);
    await wipe();
  });
});
