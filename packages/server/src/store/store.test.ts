import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { testDatabases } from '../testing/test-databases.js';
import { encodeCursor } from '../util/cursor.js';
import { DEFAULT_LIFECYCLE, type SandboxRecord } from './sandbox-store.js';
import { openStore, type Store } from './store.js';

const dialects = testDatabases('store');

function record(id: string, tenantId: string, createdAt: string, labels: Record<string, string> = {}): SandboxRecord {
  return {
    id,
    tenantId,
    template: 'base',
    templateId: 'tid',
    state: 'running',
    conditions: [],
    env: { A: 'b' },
    labels,
    cwd: '/root',
    hostname: id,
    cpuCount: 0.5,
    memoryMiB: 512,
    diskMiB: 2048,
    timeoutMs: 2_592_000_000,
    expiresAt: null,
    createdAt,
    updatedAt: createdAt,
    version: 1,
    desiredState: 'running',
    autoResume: true,
    parentId: null,
    snapshotId: null,
    lifecycle: { ...DEFAULT_LIFECYCLE },
    quarantine: null,
    network: { mode: 'egress', allowOut: ['203.0.113.0/24', '*.example.com'], denyOut: ['0.0.0.0/0'], egressMbps: 20 },
  };
}

describe.each(dialects)('store on %s', (_name, prepare) => {
  let store: Store;
  let cleanup: () => Promise<void>;
  beforeAll(async () => {
    const p = await prepare();
    cleanup = p.cleanup;
    store = openStore(p.url);
    await store.migrate();
    await store.migrate();
    for (const t of ['sandbox_labels', 'sandboxes', 'api_keys', 'templates'] as const)
      await store.db.deleteFrom(t).execute();
  });
  afterAll(async () => {
    await store?.close();
    await cleanup?.();
  });

  test('round-trips a sandbox with fractional cpu and a large timeout; fenced updates', async () => {
    await store.sandboxes.insert(record('sbx_a', 't1', '2026-01-01T00:00:00.000Z', { k: 'v' }));
    const got = await store.sandboxes.get('t1', 'sbx_a');
    expect(got).toEqual(record('sbx_a', 't1', '2026-01-01T00:00:00.000Z', { k: 'v' }));
    expect(await store.sandboxes.get('t2', 'sbx_a')).toBeNull();
    const updated = await store.sandboxes.update('t1', 'sbx_a', 1, { state: 'deleting' }, '2026-01-01T00:00:01.000Z');
    expect(updated?.version).toBe(2);
    expect(await store.sandboxes.update('t1', 'sbx_a', 1, { state: 'running' }, '2026-01-01T00:00:02.000Z')).toBeNull();
    expect(await store.sandboxes.update('t2', 'sbx_a', 2, { state: 'running' }, '2026-01-01T00:00:02.000Z')).toBeNull();
    await store.sandboxes.remove('t1', 'sbx_a');
    expect(await store.sandboxes.get('t1', 'sbx_a')).toBeNull();
    const labels = await store.db.selectFrom('sandbox_labels').selectAll().where('sandbox_id', '=', 'sbx_a').execute();
    expect(labels).toEqual([]);
  });

  test('keyset pages with equal timestamps neither skip nor repeat; label filters AND', async () => {
    const same = '2026-02-01T00:00:00.000Z';
    const ids = ['sbx_p3', 'sbx_p1', 'sbx_p2', 'sbx_p5', 'sbx_p4'];
    for (const id of ids)
      await store.sandboxes.insert(record(id, 'tp', same, { g: 'x', n: id.endsWith('1') ? 'one' : 'other' }));
    await store.sandboxes.insert(record('sbx_other_tenant', 'tq', same, { g: 'x' }));
    const seen: string[] = [];
    let after: { createdAt: string; id: string } | null = null;
    for (let i = 0; i < 5; i++) {
      const page = await store.sandboxes.list('tp', { labels: [['g', 'x']], limit: 2, after });
      if (page.length === 0) break;
      seen.push(...page.map((r) => r.id));
      const last = page.at(-1);
      after = last ? { createdAt: last.createdAt, id: last.id } : null;
    }
    expect(seen).toEqual([...ids].sort());
    const one = await store.sandboxes.list('tp', {
      labels: [
        ['g', 'x'],
        ['n', 'one'],
      ],
      limit: 10,
    });
    expect(one.map((r) => r.id)).toEqual(['sbx_p1']);
    expect(encodeCursor({ createdAt: same, id: 'x' })).toMatch(/^[A-Za-z0-9_-]+$/);
  });

  test('keys and templates', async () => {
    expect(await store.keys.hasAdminKey()).toBe(false);
    await store.keys.insert({
      id: 'key_1',
      tenantId: 'default',
      name: 'admin',
      role: 'admin',
      prefix: 'bk_abcde',
      secretHash: 'h1',
      createdAt: '2026-01-01T00:00:00.000Z',
      revokedAt: null,
    });
    expect(await store.keys.hasAdminKey()).toBe(true);
    expect((await store.keys.findBySecretHash('h1'))?.id).toBe('key_1');
    await store.keys.revoke('key_1', '2026-01-02T00:00:00.000Z');
    expect((await store.keys.get('default', 'key_1'))?.revokedAt).toBe('2026-01-02T00:00:00.000Z');
    expect(await store.keys.get('other', 'key_1')).toBeNull();
    const tmpl = {
      tenantId: 'public',
      name: 'base',
      id: 'abc',
      state: 'ready' as const,
      fromName: null,
      apt: [],
      run: [],
      sizeBytes: 5_000_000_000,
      error: null,
      createdAt: '2026-01-01T00:00:00.000Z',
    };
    expect(await store.templates.insertNew(tmpl)).toBe(true);
    expect(await store.templates.insertNew(tmpl)).toBe(false);
    expect((await store.templates.get('anyone', 'base'))?.sizeBytes).toBe(5_000_000_000);
    expect((await store.templates.list('anyone')).map((t) => t.name)).toEqual(['base']);
  });

  test('sqlite runs in WAL mode', async () => {
    if (store.dialect !== 'sqlite') return;
    const { rows } = await sql<{ journal_mode: string }>`PRAGMA journal_mode`.execute(store.db);
    expect(rows[0]?.journal_mode).toBe('wal');
  });
});
