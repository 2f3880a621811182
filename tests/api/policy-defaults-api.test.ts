import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ErrorEnvelopeSchema, SandboxSchema, TenantDefaultsSchema } from '@burrow/contract';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Burrow, createBurrow, loadConfig } from '../../packages/server/src/main.js';
import { FakeDriver } from '../../packages/server/src/testing/fake-driver.js';
import { FakeTemplateBuilder } from '../../packages/server/src/testing/fake-template-builder.js';

// Fast layer: real SQLite, the FAKE driver, and a clock the test moves. Policies run through runOnce().
const M = 60_000;
const DAY = 24 * 60 * M;
let nowMs = Date.parse('2026-11-29T12:00:00.000Z');
const clock = { nowMs: () => nowMs };
let burrow: Burrow;
let driver: FakeDriver;
let dataDir: string;
let admin: Record<string, string>;

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'burrow-gov-defaults-'));
  driver = new FakeDriver(join(dataDir, 'fake-sandboxes'));
  // No BURROW_DEFAULT_* variables: the built-in persistent defaults.
  burrow = await createBurrow(
    loadConfig({}, { dataDir, expiryWarningMs: M, warmPool: [] } as Parameters<typeof loadConfig>[1]),
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

async function call(method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, payload?: unknown, headers = admin) {
  return burrow.app.inject({
    method,
    url,
    headers,
    ...(payload === undefined ? {} : { payload: payload as object }),
  });
}

async function get(id: string) {
  const res = await call('GET', `/v1/sandboxes/${id}`);
  expect(res.statusCode, res.body).toBe(200);
  return SandboxSchema.parse(res.json());
}

describe('persistent by default (fixed clock)', () => {
  test('no options: no TTL, pauses after 15 minutes idle, and is still there, paused, 60 days later', async () => {
    const res = await call('POST', '/v1/sandboxes', {});
    expect(res.statusCode, res.body).toBe(201);
    const sbx = SandboxSchema.parse(res.json());
    expect(sbx).toMatchObject({ timeoutMs: null, timeoutAt: null, idleTimeoutMs: 15 * M, maxAgeMs: null });
    expect(sbx.pausedRetentionMs).toBeNull();
    expect(sbx.policySources).toEqual({
      timeoutMs: 'server-default',
      timeoutAction: 'server-default',
      idleTimeoutMs: 'server-default',
      maxAgeMs: 'server-default',
      pausedRetentionMs: 'server-default',
      snapshotKeepLast: 'server-default',
    });
    expect(sbx.expiry).toEqual({ at: new Date(nowMs + 15 * M).toISOString(), action: 'pause', reason: 'idle' });
    nowMs += 15 * M + 1000;
    expect((await burrow.policies.runOnce()).paused).toContain(sbx.id);
    expect((await get(sbx.id)).state).toBe('paused');
    for (let day = 0; day < 60; day++) {
      nowMs += DAY;
      await burrow.policies.runOnce();
    }
    const later = await get(sbx.id);
    expect(later.state).toBe('paused');
    expect(later.expiry).toBeNull();
    await call('DELETE', `/v1/sandboxes/${sbx.id}`);
  });

  test('ephemeral stays one option away: --timeout 600000 --timeout-action delete deletes after a warning', async () => {
    const res = await call('POST', '/v1/sandboxes', { timeoutMs: 600_000, timeoutAction: 'delete' });
    const sbx = SandboxSchema.parse(res.json());
    expect(sbx.timeoutAt).toBe(new Date(nowMs + 600_000).toISOString());
    // Keep it busy-free but active enough not to idle-pause first: the idle default (15 min) is later than the TTL.
    nowMs += 600_000;
    await burrow.policies.runOnce();
    nowMs += M;
    await burrow.policies.runOnce();
    expect((await call('GET', `/v1/sandboxes/${sbx.id}`)).statusCode).toBe(404);
  });

  test('timeoutMs counts running time: a paused sandbox outlives its TTL, and resume moves the deadline by the pause', async () => {
    const res = await call('POST', '/v1/sandboxes', {
      timeoutMs: 10 * M,
      timeoutAction: 'delete',
      idleTimeoutMs: null,
    });
    const sbx = SandboxSchema.parse(res.json());
    const createdMs = nowMs;
    nowMs += 4 * M;
    expect((await call('POST', `/v1/sandboxes/${sbx.id}/pause`)).statusCode).toBe(200);
    // An hour paused: long past the 10 minute TTL, nothing happens to it.
    for (let i = 0; i < 6; i++) {
      nowMs += 10 * M;
      await burrow.policies.runOnce();
    }
    const paused = await get(sbx.id);
    expect(paused.state).toBe('paused');
    expect(paused.expiry).toBeNull();
    const resumed = await call('POST', `/v1/sandboxes/${sbx.id}/resume`);
    expect(resumed.statusCode, resumed.body).toBe(200);
    // 4 minutes ran before the pause: 6 remain from the resume at created + 64 min.
    const back = await get(sbx.id);
    expect(back.timeoutAt).toBe(new Date(createdMs + 70 * M).toISOString());
    expect(back.expiry).toEqual({ at: back.timeoutAt, action: 'delete', reason: 'timeout' });
    await call('DELETE', `/v1/sandboxes/${sbx.id}`);
  });
});

describe('tenant defaults (admin-set, applied at create)', () => {
  test('request > tenant default > server default; existing sandboxes keep their policies; limits and roles', async () => {
    const keyRes = await call('POST', '/v1/keys', { name: 'member', tenantId: 'gov-defaults' });
    expect(keyRes.statusCode, keyRes.body).toBe(201);
    const member = { authorization: `Bearer ${(keyRes.json() as { secret: string }).secret}` };
    const before = SandboxSchema.parse((await call('POST', '/v1/sandboxes', {}, member)).json());
    expect(before.idleTimeoutMs).toBe(15 * M);

    // A member may read its defaults but not set them.
    const denied = await call('PUT', '/v1/tenants/gov-defaults/defaults', { idleTimeoutMs: 5 * M }, member);
    expect(denied.statusCode).toBe(403);
    expect(ErrorEnvelopeSchema.parse(denied.json()).error.code).toBe('forbidden');

    const set = await call('PUT', '/v1/tenants/gov-defaults/defaults', {
      idleTimeoutMs: 5 * M,
      pausedRetentionMs: 7 * DAY,
      maxAgeLimitMs: 10 * DAY,
    });
    expect(set.statusCode, set.body).toBe(200);
    const shown = TenantDefaultsSchema.parse(
      (await call('GET', '/v1/tenants/gov-defaults/defaults', undefined, member)).json(),
    );
    expect(shown.effective).toMatchObject({ idleTimeoutMs: 5 * M, pausedRetentionMs: 7 * DAY, maxAgeMs: 10 * DAY });
    expect(shown.sources).toMatchObject({ idleTimeoutMs: 'tenant-default', timeoutMs: 'server-default' });

    const after = SandboxSchema.parse((await call('POST', '/v1/sandboxes', { idleTimeoutMs: 2 * M }, member)).json());
    expect(after).toMatchObject({
      idleTimeoutMs: 2 * M,
      pausedRetentionMs: 7 * DAY,
      maxAgeMs: 10 * DAY,
      timeoutMs: null,
    });
    expect(after.policySources).toMatchObject({
      idleTimeoutMs: 'request',
      pausedRetentionMs: 'tenant-default',
      maxAgeMs: 'tenant-default',
      timeoutMs: 'server-default',
    });
    const patched = await burrow.app.inject({
      method: 'PATCH',
      url: `/v1/sandboxes/${after.id}`,
      headers: member,
      payload: { pausedRetentionMs: DAY },
    });
    expect(patched.statusCode, patched.body).toBe(200);
    expect(SandboxSchema.parse(patched.json()).policySources).toMatchObject({
      pausedRetentionMs: 'request',
      maxAgeMs: 'tenant-default',
    });
    // The sandbox made before keeps its policies.
    expect((await call('GET', `/v1/sandboxes/${before.id}`, undefined, member)).json()).toMatchObject({
      idleTimeoutMs: 15 * M,
      pausedRetentionMs: null,
      maxAgeMs: null,
    });
    // Other tenants are untouched.
    expect(SandboxSchema.parse((await call('POST', '/v1/sandboxes', {})).json()).pausedRetentionMs).toBeNull();

    for (const body of [{ maxAgeMs: 20 * DAY }, { maxAgeMs: null }]) {
      const over = await call('POST', '/v1/sandboxes', body, member);
      expect(over.statusCode, over.body).toBe(400);
      expect(ErrorEnvelopeSchema.parse(over.json()).error.code).toBe('policy_limit_exceeded');
    }
    const bad = await call('PUT', '/v1/tenants/gov-defaults/defaults', { maxAgeMs: 20 * DAY, maxAgeLimitMs: 10 * DAY });
    expect(bad.statusCode).toBe(400);
    expect((await call('PUT', '/v1/tenants/gov-defaults/defaults', { idleTimeoutMs: 10 })).statusCode).toBe(400);
    expect((await call('PUT', '/v1/tenants/gov-defaults/defaults', { bogus: 1 })).statusCode).toBe(400);
  });
});
