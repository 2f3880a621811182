import pino from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { openStore, type Store } from '../store/store.js';
import { testDatabases } from '../testing/test-databases.js';
import { type AuditEntry, AuditService } from './audit-service.js';

const admin = { keyId: 'key_admin', tenantId: 'default', role: 'admin' as const };
const entry = (i: number): AuditEntry => ({
  tenantId: i % 2 === 0 ? 'default' : 'other',
  keyId: 'key_x',
  keyName: 'x',
  sourceAddress: '127.0.0.1',
  requestId: `req_${i}`,
  action: 'DELETE /v1/sandboxes/:id',
  target: `sbx_${i}`,
  result: 'ok',
  status: 204,
  errorCode: null,
  details: null,
});

describe.each(testDatabases('audit'))('audit chain on %s', (_name, prepare) => {
  let store: Store;
  let cleanup: () => Promise<void>;
  let nowMs = Date.parse('2026-12-01T12:00:00.000Z');
  const service = () =>
    new AuditService({ store: store.audit, clock: { nowMs: () => nowMs }, logger: pino({ level: 'silent' }) });
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

  test('a removed or edited record is named by verify; retention keeps the chain verifiable', async () => {
    const audit = service();
    for (let i = 1; i <= 8; i++) {
      audit.record(entry(i));
      nowMs += 1000;
    }
    await audit.flush();
    expect(await audit.verify(admin)).toEqual({ ok: true, checked: 8, prunedThrough: null, problems: [] });
    // A second service (a restart) continues the same chain.
    const restarted = service();
    restarted.record(entry(9));
    await restarted.flush();
    expect((await restarted.verify(admin)).ok).toBe(true);

    // Edit one row's field in the database.
    await store.db.updateTable('audit_log').set({ result: 'refused' }).where('seq', '=', 3).execute();
    expect((await audit.verify(admin)).problems).toEqual([
      { id: '3', kind: 'edited', message: 'record 3 was changed' },
    ]);
    await store.db.updateTable('audit_log').set({ result: 'ok' }).where('seq', '=', 3).execute();
    // Edit and hash again: the next record names another hash.
    const { auditHash } = await import('./audit-service.js');
    const [row4] = await store.audit.page(3, 1);
    if (row4 === undefined) throw new Error('no row 4');
    const forged = { ...row4, target: 'sbx_forged' };
    const { hash: _old, ...forgedFields } = forged;
    await store.db
      .updateTable('audit_log')
      .set({ target: 'sbx_forged', hash: auditHash(forgedFields) })
      .where('seq', '=', 4)
      .execute();
    expect((await audit.verify(admin)).problems.map((p) => [p.id, p.kind])).toEqual([['4', 'edited']]);
    await store.db
      .updateTable('audit_log')
      .set({ target: row4.target, hash: row4.hash })
      .where('seq', '=', 4)
      .execute();
    // Remove a row in the middle, and the newest.
    await store.db.deleteFrom('audit_log').where('seq', '=', 5).execute();
    await store.db.deleteFrom('audit_log').where('seq', '=', 9).execute();
    const broken = await audit.verify(admin);
    expect(broken.ok).toBe(false);
    expect(broken.problems).toEqual([
      { id: '5', kind: 'removed', message: 'record 5 is missing' },
      { id: '9', kind: 'removed', message: 'record 9 is missing' },
    ]);

    // Retention: records older than the cut go, the anchor moves, and the rest verifies.
    const fresh = await prepare();
    const store2 = openStore(fresh.url);
    await store2.migrate();
    try {
      let t = Date.parse('2026-12-01T00:00:00.000Z');
      const kept = new AuditService({
        store: store2.audit,
        clock: { nowMs: () => t },
        logger: pino({ level: 'silent' }),
      });
      for (let i = 1; i <= 6; i++) {
        kept.record(entry(i));
        await kept.flush();
        t += 3_600_000;
      }
      expect(await kept.prune(3 * 3_600_000 + 1)).toBe(3);
      const after = await kept.verify(admin);
      expect(after).toMatchObject({ ok: true, checked: 3, prunedThrough: '3' });
      kept.record(entry(7));
      expect((await kept.verify(admin)).ok).toBe(true);
      // Removing the first kept record is still seen (the anchor names its predecessor).
      await store2.db.deleteFrom('audit_log').where('seq', '=', 4).execute();
      expect((await kept.verify(admin)).problems.map((p) => p.id)).toEqual(['4']);
    } finally {
      await store2.close();
      await fresh.cleanup();
    }
  });

  test('list filters by tenant, result, action, time, and pages with a cursor', async () => {
    const audit = service();
    const member = { keyId: 'key_m', tenantId: 'other', role: 'member' as const };
    const all = await audit.list(admin, { limit: 1000 });
    expect(all.items.length).toBeGreaterThan(0);
    const mine = await audit.list(member, { limit: 1000 });
    expect(mine.items.every((r) => r.tenantId === 'other')).toBe(true);
    await expect(audit.list(member, { limit: 10, tenant: 'default' })).rejects.toMatchObject({ code: 'forbidden' });
    const page1 = await audit.list(admin, { limit: 2 });
    const page2 = await audit.list(admin, { limit: 2, cursor: page1.nextCursor ?? undefined });
    expect(Number(page2.items[0]?.id)).toBeGreaterThan(Number(page1.items[1]?.id));
    expect((await audit.list(admin, { limit: 10, action: 'POST' })).items).toEqual([]);
    expect((await audit.list(admin, { limit: 10, action: 'DELETE /v1/sandboxes' })).items.length).toBeGreaterThan(0);
    const first = all.items[0];
    if (first === undefined) throw new Error('no records');
    expect((await audit.list(admin, { limit: 10, to: first.at })).items).toEqual([]);
  });
});
