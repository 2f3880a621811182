import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_RESOURCES } from '@burrow/contract';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Burrow, createBurrow, loadConfig } from '../main.js';
import { FakeDriver } from '../testing/fake-driver.js';
import { FakeTemplateBuilder } from '../testing/fake-template-builder.js';
import { parseWarmPool } from './warm-pool.js';

describe('parseWarmPool', () => {
  test('parses entries, sums duplicates, rejects malformed ones', () => {
    expect(parseWarmPool('')).toEqual([]);
    expect(parseWarmPool('none')).toEqual([]);
    expect(parseWarmPool('base:4')).toEqual([{ template: 'base', count: 4, resources: DEFAULT_RESOURCES }]);
    expect(parseWarmPool('base:1, base:2,base@2/2048/10240:1')).toEqual([
      { template: 'base', count: 3, resources: DEFAULT_RESOURCES },
      { template: 'base', count: 1, resources: { cpuCount: 2, memoryMiB: 2048, diskMiB: 10240 } },
    ]);
    for (const bad of ['base', 'base:-1', 'Base:1', 'base@1/512:1', 'base@0/512/2048:1', 'base:1;rm']) {
      expect(() => parseWarmPool(bad), bad).toThrow(RangeError);
    }
  });
});

/** Fast layer: real SQLite, the FAKE driver and template builder. */
describe('warm pool over the fake driver', () => {
  const POOL = 3;
  let dataDir = '';
  let driver: FakeDriver;
  let builder: FakeTemplateBuilder;
  let burrow: Burrow;
  let admin: Record<string, string> = {};
  const logger = pino({ level: process.env.BURROW_TEST_LOG ?? 'silent' });

  const open = async () =>
    createBurrow(
      loadConfig({}, { dataDir, warmPool: [{ template: 'base', count: POOL, resources: { ...DEFAULT_RESOURCES } }] }),
      {
        driver,
        templateBuilder: builder,
        logger,
        capacity: { cpuCount: () => 2, memoryMiB: () => 4096, freeDiskMiB: async () => 100_000 },
      },
    );
  const poolIds = async () => (await burrow.store.pool.members()).map((m) => m.id).sort();
  const create = (payload: object) =>
    burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: admin, payload });

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'burrow-pool-'));
    driver = new FakeDriver(join(dataDir, 'fake-sandboxes'));
    builder = new FakeTemplateBuilder(join(dataDir, 'fake-templates'));
    burrow = await open();
    await burrow.services.templates.ensureBase();
    admin = { authorization: `Bearer ${await burrow.services.keys.ensureAdminKey()}` };
  });
  afterAll(async () => {
    await driver?.close();
    await burrow?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  test('fills to target; pool sandboxes are in no tenant list', async () => {
    const report = await burrow.pool.fillOnce();
    expect(report.created).toHaveLength(POOL);
    expect(await burrow.pool.readyCounts()).toEqual([POOL]);
    const list = await burrow.app.inject({ method: 'GET', url: '/v1/sandboxes', headers: admin });
    expect(list.json().items).toEqual([]);
    expect((await driver.listHostResources()).sandboxIds.sort()).toEqual(await poolIds());
  });

  test('concurrent creates: each pool sandbox handed out once, the rest start cold, per-sandbox data applied', async () => {
    const pooled = new Set(await poolIds());
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, n) => create({ env: { N: String(n) }, labels: { n: String(n) }, cwd: '/tmp' })),
    );
    for (const r of results) expect(r.statusCode, r.body).toBe(201);
    const ids = results.map((r) => r.json().id as string);
    expect(new Set(ids).size).toBe(10);
    const claimed = ids.filter((id) => pooled.has(id));
    expect(claimed).toHaveLength(POOL);
    // The cold ones booted through the driver; the claimed ones were not created again.
    for (const id of ids) {
      const creates = driver.calls.filter((c) => c.verb === 'create' && c.sandboxId === id).length;
      expect(creates, id).toBe(1);
    }
    for (const [n, r] of results.entries()) {
      const body = r.json();
      expect(body.env).toEqual({ N: String(n) });
      expect(body.labels).toEqual({ n: String(n) });
      expect(body.cwd).toBe('/tmp');
      expect(body.state).toBe('running');
    }
    const listed = await burrow.app.inject({ method: 'GET', url: '/v1/sandboxes?limit=100', headers: admin });
    expect(
      listed
        .json()
        .items.map((s: { id: string }) => s.id)
        .sort(),
    ).toEqual([...ids].sort());
    expect(await poolIds()).toEqual([]);
    for (const id of ids) await burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${id}`, headers: admin });
  });

  test('a create whose resources differ from every pool spec starts cold', async () => {
    await burrow.pool.fillOnce();
    const before = await poolIds();
    expect(before).toHaveLength(POOL);
    const res = await create({ memoryMiB: 1024 });
    expect(res.statusCode, res.body).toBe(201);
    expect(before).not.toContain(res.json().id);
    expect(await poolIds()).toEqual(before);
    await burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${res.json().id}`, headers: admin });
  });

  test('a restart re-adopts pool sandboxes; one whose container vanished is replaced', async () => {
    const before = await poolIds();
    await burrow.close();
    const [gone, ...kept] = before as [string, ...string[]];
    await driver.delete(gone);
    burrow = await open();
    const report = await burrow.pool.fillOnce();
    expect(report.deleted).toEqual([gone]);
    expect(report.created).toHaveLength(1);
    const after = await poolIds();
    expect(after).toHaveLength(POOL);
    for (const id of kept) expect(after).toContain(id);
    expect((await driver.listHostResources()).sandboxIds.sort()).toEqual(after);
  });

  test('shrinking deletes pool sandboxes; draining leaves nothing on the host', async () => {
    burrow.pool.setTargets([{ template: 'base', count: 1, resources: { ...DEFAULT_RESOURCES } }]);
    const shrink = await burrow.pool.fillOnce();
    expect(shrink.deleted).toHaveLength(POOL - 1);
    expect(await poolIds()).toHaveLength(1);
    await burrow.pool.drain();
    expect(await poolIds()).toEqual([]);
    expect((await driver.listHostResources()).sandboxIds).toEqual([]);
  });
});
