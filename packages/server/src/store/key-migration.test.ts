import pino from 'pino';
import { afterAll, describe, expect, test } from 'vitest';
import { hashSecret, KeyService } from '../services/key-service.js';
import { testDatabases } from '../testing/test-databases.js';
import { openDatabase } from './database.js';
import { migrateTo } from './migrations.js';
import { openStore } from './store.js';

const cleanups: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const cleanup of cleanups) await cleanup();
});

describe.each(testDatabases('keymig'))('upgrade to scoped keys on %s', (_name, prepare) => {
  test('a key issued before keeps working with the full rights of its role', async () => {
    const db = await prepare();
    cleanups.push(db.cleanup);
    // The schema as it was before scoped keys, with keys written by the code of then (no scope columns).
    const old = openDatabase(db.url);
    await migrateTo(old.db, '2400_tenant_policy_defaults');
    for (const [id, role] of [
      ['key_0000000000000000000a', 'admin'],
      ['key_0000000000000000000m', 'member'],
    ] as const) {
      await old.db
        .insertInto('api_keys')
        .columns(['id', 'tenant_id', 'name', 'role', 'prefix', 'secret_hash', 'created_at', 'revoked_at'])
        .values({
          id,
          tenant_id: 'default',
          name: role,
          role,
          prefix: 'bk_old',
          secret_hash: hashSecret(`bk_old_${role}`),
          created_at: '2026-01-01T00:00:00.000Z',
          revoked_at: null,
        } as never)
        .execute();
    }
    await old.db.destroy();

    const store = openStore(db.url);
    await store.migrate();
    try {
      const service = new KeyService({
        keys: store.keys,
        clock: { nowMs: () => Date.parse('2026-12-01T12:00:00.000Z') },
        logger: pino({ level: 'silent' }),
      });
      const admin = await service.authenticate('bk_old_admin');
      expect(admin).toMatchObject({ role: 'admin', restriction: null, expiresAtMs: null });
      expect(admin.scopes).toContain('admin');
      expect(admin.scopes).toContain('sandboxes:write');
      const member = await service.authenticate('bk_old_member');
      expect(member).toMatchObject({ role: 'member', restriction: null });
      expect(member.scopes).toContain('commands');
      expect(member.scopes).not.toContain('admin');
      const listed = await service.list(admin);
      expect(listed.map((k) => [k.id, k.scopes, k.restriction, k.expiresAt])).toEqual([
        ['key_0000000000000000000a', null, null, null],
        ['key_0000000000000000000m', null, null, null],
      ]);
    } finally {
      await store.close();
    }
  });
});
