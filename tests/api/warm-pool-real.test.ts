import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_RESOURCES } from '@burrow/contract';
import { GvisorDriver } from '@burrow/runtime-gvisor';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Burrow, createBurrow, loadConfig } from '../../packages/server/src/main.js';
import { GvisorTemplateBuilder } from '../../packages/server/src/node/gvisor-template-builder.js';

const TEMPLATES_DIR = '/var/tmp/burrow-test-templates';
const POOL = 2;

/** The warm pool over real runsc: 4 real boots in all (2 claimed, 2 refilled and re-adopted after a restart). */
describe('warm pool over the real GvisorDriver', () => {
  let burrow: Burrow;
  let driver: GvisorDriver;
  let dataDir = '';
  let admin: Record<string, string> = {};
  const logger = pino({ level: process.env.BURROW_TEST_LOG ?? 'silent' });

  const open = () =>
    createBurrow(
      loadConfig(
        {},
        {
          dataDir,
          templatesDir: TEMPLATES_DIR,
          warmPool: [{ template: 'base', count: POOL, resources: { ...DEFAULT_RESOURCES } }],
        },
      ),
      { driver, templateBuilder: new GvisorTemplateBuilder({ templatesDir: TEMPLATES_DIR }), logger },
    );
  const exec = async (id: string, cmd: string) => {
    const res = await burrow.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/exec`,
      headers: admin,
      payload: { cmd },
    });
    expect(res.statusCode, res.body).toBe(200);
    return Buffer.from(res.json().stdout, 'base64').toString();
  };

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'burrow-pool-real-'));
    driver = new GvisorDriver({ dataDir, logger });
    burrow = await open();
    await burrow.services.templates.ensureBase();
    admin = { authorization: `Bearer ${await burrow.services.keys.ensureAdminKey()}` };
  });
  afterAll(async () => {
    // Whatever a failed case left: every sandbox of this data dir on the host.
    for (const id of (await driver.listHostResources().catch(() => ({ sandboxIds: [] }))).sandboxIds) {
      await driver.delete(id).catch((e: unknown) => console.error(`cleanup of ${id} failed`, e));
    }
    await burrow?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  test('two concurrent creates get the two pool sandboxes: each independent (boot id, randomness, hostname, disk)', async () => {
    const filled = await burrow.pool.fillOnce();
    expect(filled.failures).toEqual([]);
    expect(filled.created).toHaveLength(POOL);
    const pooled = await burrow.pool.memberIds();
    const [a, b] = await Promise.all(
      [1, 2].map((n) =>
        burrow.app.inject({
          method: 'POST',
          url: '/v1/sandboxes',
          headers: admin,
          payload: { env: { WHO: `caller-${n}` }, labels: { n: String(n) } },
        }),
      ),
    );
    expect(a?.statusCode, a?.body).toBe(201);
    expect(b?.statusCode, b?.body).toBe(201);
    const ids = [a?.json().id as string, b?.json().id as string];
    expect(new Set(ids).size).toBe(2);
    expect([...ids].sort()).toEqual([...pooled].sort());
    expect(await burrow.pool.memberIds()).toEqual([]);

    const probe =
      'cat /proc/sys/kernel/random/boot_id; hostname; head -c 16 /dev/urandom | od -An -tx1 | tr -d " \\n"; echo; echo "$WHO"';
    const [outA, outB] = await Promise.all(ids.map((id) => exec(id, probe)));
    const [bootA, hostA, randA, whoA] = (outA ?? '').trim().split('\n');
    const [bootB, hostB, randB, whoB] = (outB ?? '').trim().split('\n');
    expect(bootA).toMatch(/^[0-9a-f-]{36}$/);
    expect(bootA).not.toBe(bootB);
    expect(randA).toMatch(/^[0-9a-f]{32}$/);
    expect(randA).not.toBe(randB);
    expect(hostA).toBe(a?.json().hostname);
    expect(hostB).toBe(b?.json().hostname);
    expect(hostA).not.toBe(hostB);
    expect(new Set([whoA, whoB])).toEqual(new Set(['caller-1', 'caller-2']));
    // Own disks: a file written in one is not in the other.
    await exec(ids[0] as string, 'echo only-a > /root/mine');
    expect(await exec(ids[1] as string, 'cat /root/mine 2>/dev/null || echo absent')).toBe('absent\n');
    for (const id of ids) {
      const del = await burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${id}`, headers: admin });
      expect(del.statusCode, del.body).toBe(204);
    }
  });

  test('the pool refills, and a restart re-adopts its sandboxes without new boots or leaks', async () => {
    const refill = await burrow.pool.fillOnce();
    expect(refill.failures).toEqual([]);
    expect(refill.created).toHaveLength(POOL);
    const before = (await burrow.pool.memberIds()).sort();
    await burrow.close();
    burrow = await open();
    const again = await burrow.pool.fillOnce();
    expect(again).toMatchObject({ created: [], deleted: [], failures: [] });
    expect((await burrow.pool.memberIds()).sort()).toEqual(before);
    expect(await burrow.pool.readyCounts()).toEqual([POOL]);
    // Still alive after the restart: the reconciler leaves them alone and they run commands once claimed.
    await burrow.reconciler.reconcileOnce();
    const res = await burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: admin, payload: {} });
    expect(res.statusCode, res.body).toBe(201);
    expect(before).toContain(res.json().id);
    expect(await exec(res.json().id, 'echo ok')).toBe('ok\n');
    await burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${res.json().id}`, headers: admin });
    await burrow.pool.drain();
    expect(await burrow.pool.memberIds()).toEqual([]);
    expect((await driver.listHostResources()).sandboxIds).toEqual([]);
  });
});
