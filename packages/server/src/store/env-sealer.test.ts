import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { testSandboxRecord } from '../testing/store-records.js';
import { testDatabases } from '../testing/test-databases.js';
import { EnvSealer } from './env-sealer.js';
import { openStore, type Store } from './store.js';

const SECRET = 'hunter2-env-sealer-test-value';

describe.each(testDatabases('envseal'))('env values at rest on %s', (_name, prepare) => {
  let store: Store;
  let keysDir: string;
  let cleanup: () => Promise<void>;
  beforeAll(async () => {
    const p = await prepare();
    cleanup = p.cleanup;
    keysDir = await mkdtemp(join(tmpdir(), 'burrow-env-keys-'));
    store = openStore(p.url, { envKeysDir: keysDir });
    await store.migrate();
  });
  afterAll(async () => {
    await store?.close();
    await cleanup?.();
    if (keysDir) await rm(keysDir, { recursive: true, force: true });
  });

  const rawEnv = async (id: string) =>
    (await store.db.selectFrom('sandboxes').select('env').where('id', '=', id).executeTakeFirstOrThrow()).env;

  test('the row holds ciphertext only; a copy of it (dead tuple, WAL, backup) cannot be read after the delete', async () => {
    await store.sandboxes.insert(testSandboxRecord('sbx_sealed1', { env: { TOKEN: SECRET } }));
    expect((await store.sandboxes.get('t1', 'sbx_sealed1'))?.env).toEqual({ TOKEN: SECRET });
    const copy = await rawEnv('sbx_sealed1');
    expect(copy).not.toContain(SECRET);
    expect(copy).not.toContain('TOKEN');
    const updated = await store.sandboxes.update('t1', 'sbx_sealed1', 1, { env: { TOKEN: `${SECRET}-2` } }, 'x');
    expect(updated?.env).toEqual({ TOKEN: `${SECRET}-2` });
    const copy2 = await rawEnv('sbx_sealed1');

    await store.sandboxes.remove('t1', 'sbx_sealed1');
    expect(await readdir(keysDir)).not.toContain('sbx_sealed1.key');
    // What any left-behind copy of the column decodes to now, even for a reader with this very key directory.
    const reader = new EnvSealer(keysDir);
    expect(reader.open('sbx_sealed1', copy)).toEqual({});
    expect(reader.open('sbx_sealed1', copy2)).toEqual({});
  });

  test("a snapshot's settings env is sealed with its own key, destroyed with the snapshot", async () => {
    await store.snapshots.insert({
      id: 'snp_sealed1',
      tenantId: 't1',
      name: null,
      sandboxId: 'sbx_x',
      template: 'base',
      templateId: 'tid',
      memory: false,
      state: 'ready',
      imageSizeBytes: 0,
      diskSizeBytes: 0,
      runtimeVersion: '',
      settings: { env: { TOKEN: SECRET }, cwd: '/root', cpuCount: 1, memoryMiB: 256, diskMiB: 100, autoResume: true },
      createdAt: '2026-11-29T08:00:00.000Z',
    });
    expect((await store.snapshots.find('t1', 'snp_sealed1'))?.settings.env).toEqual({ TOKEN: SECRET });
    const raw = await store.db
      .selectFrom('snapshots')
      .select('settings')
      .where('id', '=', 'snp_sealed1')
      .executeTakeFirstOrThrow();
    expect(raw.settings).not.toContain(SECRET);
    await store.snapshots.remove('snp_sealed1');
    expect(await readdir(keysDir)).not.toContain('snp_sealed1.key');
  });

  test('rows written without a sealer still read; the startup sweep destroys keys whose row is gone', async () => {
    const plain = openStore(':memory:');
    expect(plain.sandboxes.envCodec.open('sbx_old', '{"A":"b"}')).toEqual({ A: 'b' });
    await plain.close();
    new EnvSealer(keysDir).seal('sbx_orphan1', { A: 'b' });
    await store.sandboxes.insert(testSandboxRecord('sbx_kept1', { env: { A: 'b' } }));
    expect(await store.sweepEnvKeys()).toEqual(['sbx_orphan1']);
    expect((await readdir(keysDir)).sort()).toEqual(['sbx_kept1.key']);
    await store.sandboxes.remove('t1', 'sbx_kept1');
  });
});
