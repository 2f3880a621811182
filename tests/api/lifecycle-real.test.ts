import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Event, EventListSchema, SandboxSchema } from '@burrow/contract';
import { GvisorDriver } from '@burrow/runtime-gvisor';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Burrow, createBurrow, loadConfig } from '../../packages/server/src/main.js';
import { GvisorTemplateBuilder } from '../../packages/server/src/node/gvisor-template-builder.js';

const TEMPLATES_DIR = '/var/tmp/burrow-test-templates';
const WARNING_MS = 1500;

// Real runsc, wall clock, small timeouts: the policy loop runs every 200 ms.
describe('lifecycle policies over the real GvisorDriver', () => {
  let burrow: Burrow;
  let driver: GvisorDriver;
  let dataDir = '';
  let admin: Record<string, string> = {};

  const call = async (method: 'GET' | 'POST' | 'DELETE', url: string, payload?: object) =>
    burrow.app.inject({ method, url: `/v1${url}`, headers: admin, ...(payload ? { payload } : {}) });
  const create = async (extra: object) => {
    const res = await call('POST', '/sandboxes', { memoryMiB: 256, diskMiB: 256, ...extra });
    expect(res.statusCode, res.body).toBe(201);
    return SandboxSchema.parse(res.json());
  };
  const state = async (id: string) => {
    const res = await call('GET', `/sandboxes/${id}`);
    return res.statusCode === 404 ? 'gone' : SandboxSchema.parse(res.json()).state;
  };
  const waitFor = async (what: () => Promise<boolean>, timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (await what()) return true;
      await new Promise((r) => setTimeout(r, 100));
    }
    return false;
  };
  const events = async (id: string): Promise<Event[]> => {
    await burrow.services.events.flush();
    return EventListSchema.parse((await call('GET', `/events?sandboxId=${id}`)).json()).items;
  };

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'burrow-lifecycle-real-'));
    const logger = pino({ level: process.env.BURROW_TEST_LOG ?? 'silent' });
    driver = new GvisorDriver({ dataDir, logger });
    burrow = await createBurrow(
      loadConfig({}, { dataDir, templatesDir: TEMPLATES_DIR, expiryWarningMs: WARNING_MS, warmPool: [] } as Parameters<
        typeof loadConfig
      >[1]),
      { driver, templateBuilder: new GvisorTemplateBuilder({ templatesDir: TEMPLATES_DIR }), logger },
    );
    await burrow.services.templates.ensureBase();
    admin = { authorization: `Bearer ${(await burrow.services.keys.ensureAdminKey()) ?? ''}` };
    burrow.policies.start(200);
  });
  afterAll(async () => {
    await burrow?.policies.stop();
    const rows = (await burrow?.store.sandboxes.listAcrossTenants()) ?? [];
    for (const row of rows) await driver.delete(row.id).catch((e: unknown) => console.error(e));
    await burrow?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  test('an idle sandbox pauses; one running a long command (foreground or background) does not', async () => {
    const [idle, foreground, background] = await Promise.all([
      create({ idleTimeoutMs: 2000, timeoutMs: null }),
      create({ idleTimeoutMs: 2000, timeoutMs: null }),
      create({ idleTimeoutMs: 2000, timeoutMs: null }),
    ]);
    const started = await call('POST', `/sandboxes/${background.id}/commands`, { cmd: 'sleep 8' });
    expect(started.statusCode, started.body).toBe(201);
    const exec = call('POST', `/sandboxes/${foreground.id}/exec`, { cmd: 'sleep 6', timeoutMs: 20_000 });
    expect(await waitFor(async () => (await state(idle.id)) === 'paused', 20_000)).toBe(true);
    // The idle one paused after ≥ 2 s without activity; the other two have been busy all along.
    await new Promise((r) => setTimeout(r, 1500));
    expect(await state(foreground.id)).toBe('running');
    expect(await state(background.id)).toBe('running');
    const paused = (await events(idle.id)).find((e) => e.type === 'paused');
    expect(paused).toMatchObject({ actor: 'system:reconciler', reason: 'IdleTimeout' });
    expect((await exec).statusCode).toBe(200);
    // Once the command has ended, the idle clock runs again.
    expect(await waitFor(async () => (await state(foreground.id)) === 'paused', 20_000)).toBe(true);
    for (const s of [idle, foreground, background]) await call('DELETE', `/sandboxes/${s.id}`);
  });

  test('a pause blocked by a deleted open file: 409 naming process and path; the idle policy records pause_failed once and backs off', async () => {
    const sbx = await create({ idleTimeoutMs: 1500, timeoutMs: null });
    const holder =
      'import os, time\nf = open("/root/gone.txt", "w+")\nos.unlink("/root/gone.txt")\nwhile True: time.sleep(1)\n';
    // Started detached: a running command would keep the sandbox busy, never idle.
    const started = await call('POST', `/sandboxes/${sbx.id}/exec`, {
      cmd: `echo ${Buffer.from(holder).toString('base64')} | base64 -d > /root/h.py && (setsid python3 /root/h.py </dev/null >/dev/null 2>&1 &)`,
      timeoutMs: 20_000,
    });
    expect(started.statusCode, started.body).toBe(200);
    const failed = async () => (await events(sbx.id)).filter((e) => e.type === 'pause_failed');
    expect(await waitFor(async () => (await failed()).length > 0, 30_000)).toBe(true);
    const [event] = await failed();
    expect(event).toMatchObject({ actor: 'system:reconciler', reason: 'IdleTimeout' });
    expect(event?.data).toMatchObject({
      policy: 'idle',
      cause: 'deleted_file_open',
      details: { blockers: [{ command: 'python3 /root/h.py', path: '/root/gone.txt' }] },
    });
    expect(event?.message).toMatch(/holds the deleted \/root\/gone.txt/);
    // Backed off: no retry (and no second event) within seconds; the sandbox runs on.
    await new Promise((r) => setTimeout(r, 3000));
    expect(await failed()).toHaveLength(1);
    expect(await state(sbx.id)).toBe('running');
    const pause = await call('POST', `/sandboxes/${sbx.id}/pause`);
    expect(pause.statusCode, pause.body).toBe(409);
    const { error } = pause.json() as { error: { code: string; message: string; hint: string; details: unknown } };
    expect(error.code).toBe('deleted_file_open');
    expect(error.message).toMatch(/process \d+ \(python3 \/root\/h.py\) holds the deleted \/root\/gone.txt/);
    expect(error.hint).toMatch(/details.blockers/);
    expect(error.details).toEqual({
      blockers: [{ pid: expect.any(Number), command: 'python3 /root/h.py', path: '/root/gone.txt' }],
    });
    expect(await state(sbx.id)).toBe('running');
    await call('DELETE', `/sandboxes/${sbx.id}`);
  });

  test('an expired sandbox is deleted only after its warning event, at least the warning time later', async () => {
    const sbx = await create({ timeoutMs: 2000 });
    expect(await waitFor(async () => (await state(sbx.id)) === 'gone', 30_000)).toBe(true);
    expect((await driver.listHostResources()).sandboxIds).not.toContain(sbx.id);
    const list = await events(sbx.id);
    expect(list.map((e) => e.type)).toEqual(['created', 'warning', 'expired', 'deleted']);
    const warning = list[1];
    const expired = list[2];
    expect(Date.parse(expired?.at ?? '') - Date.parse(warning?.at ?? '')).toBeGreaterThanOrEqual(WARNING_MS);
    expect(Date.parse(expired?.at ?? '')).toBeGreaterThanOrEqual(Date.parse(sbx.createdAt) + 2000);
  });
});
