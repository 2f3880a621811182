import pino from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { openStore, type Store } from '../store/store.js';
import { testDatabases } from '../testing/test-databases.js';
import type { Clock } from '../util/clock.js';
import { AUTH_CACHE_TTL_MS, KeyService } from './key-service.js';

describe.each(testDatabases('keys'))('KeyService authentication reuse on %s', (_name, prepare) => {
  let store: Store;
  let cleanup: () => Promise<void>;
  let nowMs = Date.parse('2026-11-29T08:00:00.000Z');
  const clock: Clock = { nowMs: () => nowMs };
  const logger = pino({ level: 'silent' });
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

  test('a revoke through the service refuses the key at once', async () => {
    const keys = new KeyService({ keys: store.keys, clock, logger });
    const adminSecret = await keys.ensureAdminKey();
    if (adminSecret === null) throw new Error('expected a new admin key');
    const admin = await keys.authenticate(adminSecret);
    const { key, secret } = await keys.create(admin, { name: 'm', role: 'member' });
    expect((await keys.authenticate(secret)).keyId).toBe(key.id);
    await keys.revoke(admin, key.id);
    await expect(keys.authenticate(secret)).rejects.toMatchObject({ code: 'unauthorized' });
  });

  test('a revoke through another server is seen once the reuse bound passed', async () => {
    const here = new KeyService({ keys: store.keys, clock, logger });
    const elsewhere = new KeyService({ keys: store.keys, clock, logger });
    const admin = { keyId: 'key_admin', tenantId: 'default', role: 'admin' as const };
    const { key, secret } = await elsewhere.create(admin, { name: 'm2', role: 'member' });
    expect((await here.authenticate(secret)).keyId).toBe(key.id);
    await elsewhere.revoke(admin, key.id);
    // Within the bound the cached success may still be used; past it the key is read again.
    nowMs += AUTH_CACHE_TTL_MS + 1;
    await expect(here.authenticate(secret)).rejects.toMatchObject({ code: 'unauthorized' });
    // An unknown secret is never cached as a success.
    await expect(here.authenticate('bk_unknown')).rejects.toMatchObject({ code: 'unauthorized' });
  });
  test('an e2b-format key authenticates like any other', async () => {
    const keys = new KeyService({ keys: store.keys, clock, logger });
    const admin = { keyId: 'key_test', tenantId: 'default', role: 'admin' as const };
    const { key, secret } = await keys.create(admin, { name: 'e2b', role: 'member', format: 'e2b' });
    expect(secret).toMatch(/^e2b_[0-9a-f]{40}$/);
    expect((await keys.authenticate(secret)).keyId).toBe(key.id);
  });
});
