import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { testSandboxRecord } from '../testing/store-records.js';
import { testDatabases } from '../testing/test-databases.js';
import { QuotaExceededError, UNLIMITED } from './quota-store.js';
import { openStore, type Store } from './store.js';
import { VolumeMountTakenError, VolumeNameTakenError, type VolumeRecord } from './volume-store.js';

const NOW = '2026-12-02T08:00:00.000Z';
const MIB = 1024 * 1024;

function volume(id: string, tenantId: string, name: string, sizeMiB = 64): VolumeRecord {
  return {
    id,
    tenantId,
    name,
    kind: 'volume',
    sizeMiB,
    labels: { team: 'a' },
    shared: false,
    state: 'ready',
    sourceId: null,
    copyMethod: null,
    expiresAt: null,
    createdAt: NOW,
    updatedAt: NOW,
  };
}

describe.each(testDatabases('volumes'))('volume rows on %s', (_name, prepare) => {
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

  test('20 concurrent creates against maxVolumes 5 yield exactly 5; bytes and names are checked', async () => {
    await store.sandboxes.quotas.setLimits('v1', { ...UNLIMITED, maxVolumes: 5, maxVolumeBytes: 1024 * MIB }, NOW);
    const results = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) => store.volumes.insert(volume(`vol_v1_${i}`, 'v1', `n${i}`))),
    );
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(5);
    expect(results.every((r) => r.status === 'fulfilled' || r.reason instanceof QuotaExceededError)).toBe(true);
    expect(await store.sandboxes.quotas.usage('v1')).toMatchObject({ volumes: 5, volumeBytes: 5 * 64 * MIB });
    await store.sandboxes.quotas.setLimits('v1', { ...UNLIMITED, maxVolumeBytes: 400 * MIB }, NOW);
    await expect(store.volumes.insert(volume('vol_v1_big', 'v1', 'big', 100))).rejects.toThrow(/maxVolumeBytes/);
    const [first] = await store.volumes.list('v1', { labels: [], limit: 1 });
    await expect(store.volumes.grow('v1', first?.id ?? '', 64, 200, NOW)).rejects.toBeInstanceOf(QuotaExceededError);
    await store.sandboxes.quotas.setLimits('v1', UNLIMITED, NOW);
    await expect(store.volumes.insert(volume('vol_v1_dup', 'v1', first?.name ?? ''))).rejects.toBeInstanceOf(
      VolumeNameTakenError,
    );
    // Another tenant may use the name; it does not see v1's volume.
    await store.volumes.insert(volume('vol_v2_a', 'v2', first?.name ?? ''));
    expect((await store.volumes.get('v2', first?.id ?? ''))?.id).toBeUndefined();
  });

  test('one read-write mount of a non-shared volume; a refused mount rolls back its sandbox', async () => {
    await store.volumes.insert(volume('vol_m_a', 'm', 'data'));
    const mount = (sandboxId: string, readOnly: boolean, shared = false) => ({
      sandboxId,
      volumeId: 'vol_m_a',
      tenantId: 'm',
      path: '/data',
      readOnly,
      position: 0,
      shared,
      name: 'data',
    });
    const insert = (id: string, readOnly: boolean) =>
      store.sandboxes.insert(testSandboxRecord(id, { tenantId: 'm' }), {
        also: async (trx) => {
          await store.volumes.insertMounts(trx, [mount(id, readOnly)]);
          return null;
        },
      });
    await insert('sbx_m_1', false);
    await insert('sbx_m_2', true);
    await expect(insert('sbx_m_3', false)).rejects.toBeInstanceOf(VolumeMountTakenError);
    expect(await store.sandboxes.get('m', 'sbx_m_3')).toBeNull();
    expect((await store.volumes.mountsOfVolume('vol_m_a')).map((m) => m.sandboxId)).toEqual(['sbx_m_1', 'sbx_m_2']);
    await store.sandboxes.remove('m', 'sbx_m_1');
    await insert('sbx_m_3', false);
    expect((await store.volumes.mountsOfSandbox('sbx_m_3')).map((m) => m.readOnly)).toEqual([false]);
  });
});
