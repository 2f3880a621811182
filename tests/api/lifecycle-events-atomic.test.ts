/**
 * Events that are not state transitions (`expired`, deletion `warning`s, `snapshot_created`, `snapshot_deleted`)
 * commit in the same store transaction as the change they report, so a server killed between the two keeps both
 * or neither. In-process equivalent of a kill at the event write: a SQLite trigger makes every event insert fail
 * (the write dies where a crash would cut it); the cause must not be committed either. With the trigger dropped
 * (the "restarted" server), the policy step or request runs again and leaves exactly one event.
 *
 * Fast layer: real SQLite, the FAKE driver, a clock the test moves; policies run through runOnce().
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Event, EventListSchema, SandboxSchema } from '@burrow/contract';
import { sql } from 'kysely';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Burrow, createBurrow, loadConfig } from '../../packages/server/src/main.js';
import { FakeDriver } from '../../packages/server/src/testing/fake-driver.js';
import { FakeTemplateBuilder } from '../../packages/server/src/testing/fake-template-builder.js';

const WARNING_MS = 60_000;
let nowMs = Date.parse('2026-11-29T08:00:00.000Z');
const clock = { nowMs: () => nowMs };
let burrow: Burrow;
let driver: FakeDriver;
let dataDir: string;
let admin: Record<string, string>;

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'burrow-events-atomic-'));
  driver = new FakeDriver(join(dataDir, 'fake-sandboxes'));
  burrow = await createBurrow(
    loadConfig({}, { dataDir, expiryWarningMs: WARNING_MS, warmPool: [] } as Parameters<typeof loadConfig>[1]),
    {
      driver,
      templateBuilder: new FakeTemplateBuilder(join(dataDir, 'fake-templates')),
      logger: pino({ level: process.env.BURROW_TEST_LOG ?? 'silent' }),
      clock,
      capacity: { cpuCount: () => 2, memoryMiB: () => 4096, freeDiskMiB: async () => 10_000_000 },
    },
  );
  await burrow.services.templates.ensureBase();
  admin = { authorization: `Bearer ${(await burrow.services.keys.ensureAdminKey()) ?? ''}` };
  await burrow.app.ready();
});
afterAll(async () => {
  await driver?.close();
  await burrow?.close();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

/** Make every event insert fail from now on (the process "dies" at the event write), or stop that. */
async function killAtEventWrite(armed: boolean): Promise<void> {
  if (armed) {
    await sql`CREATE TRIGGER crash_at_event_write BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'killed at the event write'); END`.execute(
      burrow.store.db,
    );
  } else {
    await sql`DROP TRIGGER IF EXISTS crash_at_event_write`.execute(burrow.store.db);
  }
}

async function call(method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, payload?: unknown) {
  return burrow.app.inject({
    method,
    url,
    headers: admin,
    ...(payload === undefined ? {} : { payload: payload as object }),
  });
}

async function eventsOf(sandboxId: string): Promise<Event[]> {
  await burrow.services.events.flush();
  const res = await call('GET', `/v1/events?sandboxId=${sandboxId}&limit=500`);
  expect(res.statusCode, res.body).toBe(200);
  return EventListSchema.parse(res.json()).items;
}

const typesOf = async (sandboxId: string) => (await eventsOf(sandboxId)).map((e) => e.type);

describe('webhook SSRF policy (default config)', () => {
  test('a webhook URL on an internal address is refused with webhook_url_forbidden (422)', async () => {
    const res = await call('POST', '/v1/webhooks', { url: 'http://127.0.0.1:9/hook' });
    expect(res.statusCode, res.body).toBe(422);
    expect(res.json().error).toMatchObject({ code: 'webhook_url_forbidden', details: { address: '127.0.0.1' } });
    const listed = await call('GET', '/v1/webhooks');
    expect(listed.json().items).toEqual([]);
  });
});

describe('non-transition events commit with their change', () => {
  test('quota_denied is stored before the refusal is answered (no flush needed)', async () => {
    const set = await call('PUT', '/v1/tenants/atomic-quota/quota', { maxSandboxes: 0 });
    expect(set.statusCode, set.body).toBe(200);
    const key = await call('POST', '/v1/keys', { name: 'q', tenantId: 'atomic-quota' });
    const member = { authorization: `Bearer ${key.json().secret as string}` };
    const refused = await burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: member, payload: {} });
    expect(refused.statusCode, refused.body).toBe(429);
    const stored = await burrow.app.inject({ method: 'GET', url: '/v1/events?type=quota_denied', headers: member });
    expect(EventListSchema.parse(stored.json()).items.map((e) => e.data)).toEqual([
      { limit: 'maxSandboxes', max: 0, used: 0, requested: 1 },
    ]);
  });

  test('expiry: the warning and its bookkeeping, then `expired` and the `deleting` row, are both-or-neither', async () => {
    const res = await call('POST', '/v1/sandboxes', { timeoutMs: 120_000 });
    expect(res.statusCode, res.body).toBe(201);
    const sbx = SandboxSchema.parse(res.json());
    try {
      nowMs += 120_000 - WARNING_MS / 2; // inside the warning window
      await killAtEventWrite(true);
      try {
        const failed = await burrow.policies.runOnce();
        expect(failed.warned).not.toContain(sbx.id);
        expect(failed.failures.map((f) => f.id)).toContain(sbx.id);
      } finally {
        await killAtEventWrite(false);
      }
      // Neither the warning nor its bookkeeping was kept: the restarted pass warns (once).
      const row = await burrow.store.sandboxes.getAcrossTenants(sbx.id);
      expect(row?.lifecycle?.expiryWarnedAt ?? null).toBeNull();
      expect(await typesOf(sbx.id)).toEqual(['created']);
      nowMs += 5_000; // past the failed step's backoff
      expect((await burrow.policies.runOnce()).warned).toContain(sbx.id);
      expect((await burrow.policies.runOnce()).warned).not.toContain(sbx.id);
      expect(await typesOf(sbx.id)).toEqual(['created', 'warning']);

      nowMs += WARNING_MS; // past the deadline and the full warning time
      await killAtEventWrite(true);
      try {
        const failed = await burrow.policies.runOnce();
        expect(failed.deleted).not.toContain(sbx.id);
      } finally {
        await killAtEventWrite(false);
      }
      // No `deleting` row without its `expired` event, and the runtime was not touched.
      expect((await burrow.store.sandboxes.getAcrossTenants(sbx.id))?.state).toBe('running');
      expect(driver.calls.filter((c) => c.verb === 'delete' && c.sandboxId === sbx.id)).toEqual([]);
      nowMs += 10_000;
      expect((await burrow.policies.runOnce()).deleted).toContain(sbx.id);
      expect(await typesOf(sbx.id)).toEqual(['created', 'warning', 'expired', 'deleted']);
    } finally {
      await call('DELETE', `/v1/sandboxes/${sbx.id}`);
    }
  });

  test('snapshots: created, retention warning, deletion (API and retention) are both-or-neither', async () => {
    const res = await call('POST', '/v1/sandboxes', { timeoutMs: null, snapshotKeepLast: 1 });
    expect(res.statusCode, res.body).toBe(201);
    const sbx = SandboxSchema.parse(res.json());
    const snapshotEvents = async (snapshotId: string) =>
      (await eventsOf(sbx.id)).filter((e) => e.snapshotId === snapshotId).map((e) => e.type);
    const readyIds = async () =>
      (await burrow.store.snapshots.listAcrossTenants())
        .filter((s) => s.sandboxId === sbx.id && s.state === 'ready')
        .map((s) => s.id);
    try {
      // A snapshot whose `snapshot_created` cannot be stored is not kept either.
      await killAtEventWrite(true);
      try {
        const refused = await call('POST', `/v1/sandboxes/${sbx.id}/snapshots`, { retentionMs: 3_600_000 });
        expect(refused.statusCode).toBeGreaterThanOrEqual(500);
      } finally {
        await killAtEventWrite(false);
      }
      expect(await readyIds()).toEqual([]);
      const take = async () => {
        const made = await call('POST', `/v1/sandboxes/${sbx.id}/snapshots`, { retentionMs: 3_600_000 });
        expect(made.statusCode, made.body).toBe(201);
        return made.json() as { id: string; expiresAt: string | null };
      };
      const older = await take();
      expect(older.expiresAt).toBe(new Date(nowMs + 3_600_000).toISOString());
      const created = (await eventsOf(sbx.id)).filter((e) => e.snapshotId === older.id);
      expect(created.map((e) => e.type)).toEqual(['snapshot_created']);
      expect(created[0]?.data).toMatchObject({ expiresAt: older.expiresAt });
      nowMs += 1_000;
      const newer = await take();

      // keep-last-1: the older one is due a retention warning.
      await killAtEventWrite(true);
      try {
        expect((await burrow.policies.runOnce()).warned).not.toContain(older.id);
      } finally {
        await killAtEventWrite(false);
      }
      const unwarned = (await burrow.store.snapshots.listAcrossTenants()).find((s) => s.id === older.id);
      expect(unwarned?.retentionDeleteAt).toBeNull();
      expect((await burrow.policies.runOnce()).warned).toContain(older.id);
      expect(await snapshotEvents(older.id)).toEqual(['snapshot_created', 'warning']);

      nowMs += WARNING_MS;
      await killAtEventWrite(true);
      try {
        expect((await burrow.policies.runOnce()).snapshotsDeleted).not.toContain(older.id);
      } finally {
        await killAtEventWrite(false);
      }
      // The row (and so its bytes) stays until its `snapshot_deleted` can be stored with its removal.
      expect(await readyIds()).toContain(older.id);
      expect((await call('GET', `/v1/snapshots/${older.id}`)).statusCode).toBe(200);
      expect((await burrow.policies.runOnce()).snapshotsDeleted).toEqual([older.id]);
      expect(await snapshotEvents(older.id)).toEqual(['snapshot_created', 'warning', 'snapshot_deleted']);

      // Deleting through the API: the same guarantee.
      await killAtEventWrite(true);
      try {
        expect((await call('DELETE', `/v1/snapshots/${newer.id}`)).statusCode).toBeGreaterThanOrEqual(500);
      } finally {
        await killAtEventWrite(false);
      }
      expect((await call('GET', `/v1/snapshots/${newer.id}`)).statusCode).toBe(200);
      expect((await call('DELETE', `/v1/snapshots/${newer.id}`)).statusCode).toBe(204);
      expect(await snapshotEvents(newer.id)).toEqual(['snapshot_created', 'snapshot_deleted']);
    } finally {
      await call('DELETE', `/v1/sandboxes/${sbx.id}`);
    }
  });
});
