import { createHmac, timingSafeEqual } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Event, EventListSchema, QuotaSchema, SandboxSchema } from '@burrow/contract';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Burrow, createBurrow, loadConfig } from '../../packages/server/src/main.js';
import { FakeDriver } from '../../packages/server/src/testing/fake-driver.js';
import { FakeTemplateBuilder } from '../../packages/server/src/testing/fake-template-builder.js';

// Fast layer: real SQLite, the FAKE driver, and a clock the test moves. Policies run through runOnce().
const WARNING_MS = 60_000;
let nowMs = Date.parse('2026-11-29T08:00:00.000Z');
const clock = { nowMs: () => nowMs };
let burrow: Burrow;
let driver: FakeDriver;
let dataDir: string;
let admin: Record<string, string>;

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'burrow-lifecycle-'));
  driver = new FakeDriver(join(dataDir, 'fake-sandboxes'));
  burrow = await createBurrow(
    loadConfig({}, {
      dataDir,
      expiryWarningMs: WARNING_MS,
      webhookRetryBaseMs: 50,
      // The test's receiver listens on 127.0.0.1.
      webhookAllowPrivate: true,
      warmPool: [],
    } as Parameters<typeof loadConfig>[1]),
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

async function call(
  method: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE',
  url: string,
  payload?: unknown,
  headers = admin,
) {
  return burrow.app.inject({ method, url, headers, ...(payload === undefined ? {} : { payload: payload as object }) });
}

async function create(body: Record<string, unknown>, headers = admin) {
  const res = await call('POST', '/v1/sandboxes', body, headers);
  expect(res.statusCode, res.body).toBe(201);
  return SandboxSchema.parse(res.json());
}

async function events(query: string): Promise<Event[]> {
  await burrow.services.events.flush();
  const res = await call('GET', `/v1/events?${query}`);
  expect(res.statusCode, res.body).toBe(200);
  return EventListSchema.parse(res.json()).items;
}

describe('policies on create, visible expiry, PATCH and keepalive', () => {
  test('create shows expiresAt, expiry and the idle deadline; PATCH changes one policy only', async () => {
    const sbx = await create({ timeoutMs: 3_600_000, idleTimeoutMs: 600_000, maxAgeMs: 7_200_000 });
    expect(sbx.expiry).toEqual({ at: new Date(nowMs + 600_000).toISOString(), action: 'pause', reason: 'idle' });
    expect(sbx.expiresAt).toBe(sbx.expiry?.at);
    expect(sbx.idleDeadlineAt).toBe(new Date(nowMs + 600_000).toISOString());
    expect(sbx.timeoutAt).toBe(new Date(nowMs + 3_600_000).toISOString());
    const patched = await call('PATCH', `/v1/sandboxes/${sbx.id}`, { idleTimeoutMs: null });
    expect(patched.statusCode, patched.body).toBe(200);
    const after = SandboxSchema.parse(patched.json());
    expect(after.idleDeadlineAt).toBeNull();
    expect(after.timeoutAt).toBe(sbx.timeoutAt);
    expect(after.maxAgeMs).toBe(7_200_000);
    expect(after.expiry).toMatchObject({ action: 'delete', reason: 'timeout' });
    const bad = await call('PATCH', `/v1/sandboxes/${sbx.id}`, { idleTimeoutMs: -5 });
    expect(bad.statusCode).toBe(400);
    expect((await call('PATCH', `/v1/sandboxes/${sbx.id}`, {})).statusCode).toBe(400);
    await call('DELETE', `/v1/sandboxes/${sbx.id}`);
  });

  test('PATCH env replaces the default env of new commands and later fork children, validated as on create', async () => {
    const sbx = await create({ env: { TOKEN: 'old-value', KEEP: 'k' }, timeoutMs: null });
    const execEnv = async (id: string) => {
      const res = await call('POST', `/v1/sandboxes/${id}/exec`, { cmd: ['sh', '-c', 'echo "$TOKEN/$KEEP"'] });
      expect(res.statusCode, res.body).toBe(200);
      return Buffer.from((res.json() as { stdout: string }).stdout, 'base64')
        .toString()
        .trim();
    };
    expect(await execEnv(sbx.id)).toBe('old-value/k');
    const patched = await call('PATCH', `/v1/sandboxes/${sbx.id}`, { env: { TOKEN: 'new-value' } });
    expect(patched.statusCode, patched.body).toBe(200);
    expect(SandboxSchema.parse(patched.json()).env).toEqual({ TOKEN: 'new-value' });
    expect(await execEnv(sbx.id)).toBe('new-value/');
    const forked = await call('POST', `/v1/sandboxes/${sbx.id}/fork`, { count: 1 });
    expect(forked.statusCode, forked.body).toBe(201);
    const child = (forked.json() as { items: Array<{ id: string; env: Record<string, string> }> }).items[0];
    expect(child?.env).toEqual({ TOKEN: 'new-value' });
    expect(await execEnv(child?.id ?? '')).toBe('new-value/');
    for (const env of [{ '1BAD': 'x' }, { A: 'nul\u0000' }, { A: 1 }]) {
      const bad = await call('PATCH', `/v1/sandboxes/${sbx.id}`, { env });
      expect(bad.statusCode, bad.body).toBe(400);
      expect(bad.json()).toMatchObject({ error: { code: 'invalid_request' } });
    }
    for (const id of [sbx.id, child?.id ?? '']) await call('DELETE', `/v1/sandboxes/${id}`);
  });

  test('keepalive pushes the TTL later and never earlier', async () => {
    const sbx = await create({ timeoutMs: 600_000 });
    nowMs += 60_000;
    const kept = SandboxSchema.parse((await call('POST', `/v1/sandboxes/${sbx.id}/keepalive`, {})).json());
    expect(kept.timeoutAt).toBe(new Date(nowMs + 600_000).toISOString());
    await call('PATCH', `/v1/sandboxes/${sbx.id}`, { timeoutMs: 3_600_000 });
    const again = SandboxSchema.parse(
      (await call('POST', `/v1/sandboxes/${sbx.id}/keepalive`, { durationMs: 1000 })).json(),
    );
    expect(again.timeoutAt).toBe(new Date(nowMs + 3_600_000).toISOString());
    await call('DELETE', `/v1/sandboxes/${sbx.id}`);
  });
});

describe('the policy enforcer (fixed clock)', () => {
  test('an idle sandbox pauses; a busy one (open hold) does not', async () => {
    const idle = await create({ idleTimeoutMs: 5_000, timeoutMs: null });
    const busy = await create({ idleTimeoutMs: 5_000, timeoutMs: null });
    const release = burrow.services.activity?.hold(busy.id);
    nowMs += 6_000;
    const report = await burrow.policies.runOnce();
    expect(report.paused).toContain(idle.id);
    expect(report.paused).not.toContain(busy.id);
    release?.();
    const paused = await events(`sandboxId=${idle.id}&type=paused`);
    expect(paused).toHaveLength(1);
    expect(paused[0]).toMatchObject({ actor: 'system:reconciler', reason: 'IdleTimeout' });
    for (const s of [idle, busy]) await call('DELETE', `/v1/sandboxes/${s.id}`);
  });

  test('every call on a sandbox counts as activity (resume of a running one too); reading its record does not', async () => {
    const sbx = await create({ idleTimeoutMs: 5_000, timeoutMs: null });
    nowMs += 4_000;
    const resumed = await call('POST', `/v1/sandboxes/${sbx.id}/resume`);
    expect(resumed.statusCode, resumed.body).toBe(200);
    const view = SandboxSchema.parse(resumed.json());
    expect(view.state).toBe('running');
    // The answer already shows the moved deadline.
    expect(view.idleDeadlineAt).toBe(new Date(nowMs + 5_000).toISOString());
    nowMs += 4_000;
    expect((await burrow.policies.runOnce()).paused).not.toContain(sbx.id);
    // A file call counts; GET of the record does not move the deadline.
    expect((await call('GET', `/v1/sandboxes/${sbx.id}/files?path=/`)).statusCode).toBe(200);
    const touchedAtMs = nowMs;
    nowMs += 3_000;
    const read = SandboxSchema.parse((await call('GET', `/v1/sandboxes/${sbx.id}`)).json());
    expect(read.idleDeadlineAt).toBe(new Date(touchedAtMs + 5_000).toISOString());
    nowMs += 3_000;
    expect((await burrow.policies.runOnce()).paused).toContain(sbx.id);
    await call('DELETE', `/v1/sandboxes/${sbx.id}`);
  });

  test('snapshot retention warns first and deletes only after the full warning time; the view shows when', async () => {
    const sbx = await create({ timeoutMs: null, snapshotKeepLast: 1 });
    const snap = async () => {
      const res = await call('POST', `/v1/sandboxes/${sbx.id}/snapshots`, {});
      expect(res.statusCode, res.body).toBe(201);
      return res.json() as { id: string };
    };
    const older = await snap();
    nowMs += 1_000;
    const newer = await snap();
    const first = await burrow.policies.runOnce();
    expect(first.warned).toContain(older.id);
    expect(first.snapshotsDeleted).toEqual([]);
    const shown = (await call('GET', `/v1/snapshots/${older.id}`)).json() as { expiresAt: string; expiry: unknown };
    expect(shown.expiresAt).toBe(new Date(nowMs + WARNING_MS).toISOString());
    expect(shown.expiry).toMatchObject({ action: 'delete', reason: 'snapshot-retention' });
    expect((await burrow.policies.runOnce()).snapshotsDeleted).toEqual([]);
    nowMs += WARNING_MS;
    expect((await burrow.policies.runOnce()).snapshotsDeleted).toEqual([older.id]);
    expect((await call('GET', `/v1/snapshots/${newer.id}`)).statusCode).toBe(200);
    const list = (await events(`sandboxId=${sbx.id}`)).filter((e) => e.snapshotId === older.id);
    expect(list.map((e) => e.type)).toEqual(['snapshot_created', 'warning', 'snapshot_deleted']);
    expect(list[1]?.data).toMatchObject({ policy: 'keep-last', action: 'delete' });
    // Raising keep-last before the deletion withdraws the plan: nothing is deleted and the view forgets it.
    const third = await snap();
    expect((await burrow.policies.runOnce()).warned).toContain(newer.id);
    expect((await call('PATCH', `/v1/sandboxes/${sbx.id}`, { snapshotKeepLast: 5 })).statusCode).toBe(200);
    await burrow.policies.runOnce();
    nowMs += WARNING_MS;
    expect((await burrow.policies.runOnce()).snapshotsDeleted).toEqual([]);
    expect(((await call('GET', `/v1/snapshots/${newer.id}`)).json() as { expiresAt: unknown }).expiresAt).toBeNull();
    for (const id of [newer.id, third.id]) expect((await call('GET', `/v1/snapshots/${id}`)).statusCode).toBe(200);
    await call('DELETE', `/v1/sandboxes/${sbx.id}`);
  });

  test('an expired sandbox is deleted only after its warning event, and the full warning time', async () => {
    const sbx = await create({ timeoutMs: 10_000 });
    nowMs += 20_000; // past the deadline without a warning (as after downtime)
    expect((await burrow.policies.runOnce()).warned).toContain(sbx.id);
    expect((await burrow.policies.runOnce()).deleted).not.toContain(sbx.id);
    nowMs += WARNING_MS;
    expect((await burrow.policies.runOnce()).deleted).toContain(sbx.id);
    const list = await events(`sandboxId=${sbx.id}`);
    expect(list.map((e) => e.type)).toEqual(['created', 'warning', 'expired', 'deleted']);
    expect(list[1]?.data).toMatchObject({ policy: 'timeout' });
    expect(list[2]).toMatchObject({ actor: 'system:reconciler', reason: 'TimeoutExpired' });
    expect(list[0]?.actor).toMatch(/^key_/);
  });

  test('a deletion warned inside its warning window shows expiresAt when it will happen, not the past deadline', async () => {
    const sbx = await create({ timeoutMs: null, maxAgeMs: 3_600_000 });
    nowMs += 10_000;
    const patched = await call('PATCH', `/v1/sandboxes/${sbx.id}`, { maxAgeMs: 1_000 });
    expect(patched.statusCode, patched.body).toBe(200);
    // Not warned yet: the answer already shows the deletion a full warning time away, not the bare deadline.
    expect(SandboxSchema.parse(patched.json()).expiresAt).toBe(new Date(nowMs + WARNING_MS).toISOString());
    const warnedAt = nowMs;
    expect((await burrow.policies.runOnce()).warned).toContain(sbx.id);
    const [warning] = await events(`sandboxId=${sbx.id}&type=warning`);
    const deleteAt = new Date(warnedAt + WARNING_MS).toISOString();
    expect(warning?.data).toMatchObject({ deleteAt, policy: 'max-age' });
    const view = SandboxSchema.parse((await call('GET', `/v1/sandboxes/${sbx.id}`)).json());
    // It showed the max-age deadline, 9 s in the past, while the deletion was a minute away.
    expect(view.expiresAt).toBe(deleteAt);
    expect(view.expiry).toMatchObject({ at: deleteAt, action: 'delete', reason: 'max-age' });
    nowMs += WARNING_MS;
    expect((await burrow.policies.runOnce()).deleted).toContain(sbx.id);
  });

  test('a TTL with action pause pauses once, then paused retention deletes after a warning', async () => {
    const sbx = await create({ timeoutMs: 10_000, timeoutAction: 'pause', pausedRetentionMs: 120_000 });
    nowMs += 11_000;
    expect((await burrow.policies.runOnce()).paused).toContain(sbx.id);
    const got = SandboxSchema.parse((await call('GET', `/v1/sandboxes/${sbx.id}`)).json());
    expect(got.state).toBe('paused');
    expect(got.timeoutAt).toBeNull();
    expect(got.expiry).toMatchObject({ action: 'delete', reason: 'paused-retention' });
    nowMs += 120_000 - WARNING_MS;
    expect((await burrow.policies.runOnce()).warned).toContain(sbx.id);
    nowMs += WARNING_MS;
    expect((await burrow.policies.runOnce()).deleted).toContain(sbx.id);
  });
});

describe('quotas', () => {
  test('50 concurrent creates against maxSandboxes 10 yield exactly 10; the rest get 429 and quota_denied', async () => {
    const key = await call('POST', '/v1/keys', { name: 'q', tenantId: 'quota-test' });
    const member = { authorization: `Bearer ${key.json().secret as string}` };
    const set = await call('PUT', '/v1/tenants/quota-test/quota', { maxSandboxes: 10, maxDiskBytes: 1e15 });
    expect(set.statusCode, set.body).toBe(200);
    expect((await call('PUT', '/v1/tenants/quota-test/quota', { maxSandboxes: 1 }, member)).statusCode).toBe(403);
    const results = await Promise.all(
      Array.from({ length: 50 }, () => call('POST', '/v1/sandboxes', { timeoutMs: null }, member)),
    );
    const codes = results.map((r) => r.statusCode);
    expect(codes.filter((c) => c === 201)).toHaveLength(10);
    expect(codes.filter((c) => c === 429)).toHaveLength(40);
    expect(results.find((r) => r.statusCode === 429)?.json().error.code).toBe('quota_exceeded');
    const quota = QuotaSchema.parse((await call('GET', '/v1/quota', undefined, member)).json());
    expect(quota.usage.sandboxes).toBe(10);
    expect(quota.limits.maxSandboxes).toBe(10);
    await burrow.services.events.flush();
    const denied = await call('GET', '/v1/events?type=quota_denied&limit=500', undefined, member);
    expect(EventListSchema.parse(denied.json()).items).toHaveLength(40);
    for (const r of results.filter((x) => x.statusCode === 201)) {
      await call('DELETE', `/v1/sandboxes/${r.json().id as string}`, undefined, member);
    }
  });
});

describe('webhooks and the SSE stream', () => {
  let server: Server;
  const received: Array<{ body: string; signature: string }> = [];
  let failNext = 1;
  beforeAll(async () => {
    server = createServer((req: IncomingMessage, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        if (failNext > 0) {
          failNext -= 1;
          res.writeHead(500).end();
          return;
        }
        received.push({ body: Buffer.concat(chunks).toString(), signature: String(req.headers['burrow-signature']) });
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  });
  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
  });

  test('deliveries are signed (HMAC-SHA256 over "t.body") and retried after a 500', async () => {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
    const added = await call('POST', '/v1/webhooks', { url, types: ['created'] });
    expect(added.statusCode, added.body).toBe(201);
    const { webhook, secret } = added.json() as { webhook: { id: string }; secret: string };
    const sbx = await create({});
    // The dispatcher polls on timers; due times come from the test clock, moved below.
    burrow.webhooks.start();
    const deadline = Date.now() + 10_000;
    while (received.length === 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
      nowMs += 100; // the retry's backoff (50 ms, then 100 ms …) is measured on the test clock
    }
    await burrow.webhooks.stop();
    expect(received).toHaveLength(1);
    const got = received[0];
    const match = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(got?.signature ?? '');
    expect(match).not.toBeNull();
    const expected = createHmac('sha256', secret).update(`${match?.[1]}.${got?.body}`).digest();
    expect(timingSafeEqual(expected, Buffer.from(match?.[2] ?? '', 'hex'))).toBe(true);
    expect(JSON.parse(got?.body ?? '{}')).toMatchObject({ type: 'created', sandboxId: sbx.id });
    const list = await call('GET', '/v1/webhooks');
    expect(list.json().items[0]).toMatchObject({ id: webhook.id, deliveries: { delivered: 1, pending: 0 } });
    expect(failNext).toBe(0); // the first attempt got the 500 and was retried
    expect((await call('DELETE', `/v1/webhooks/${webhook.id}`)).statusCode).toBe(204);
    expect((await call('DELETE', `/v1/webhooks/${webhook.id}`)).statusCode).toBe(404);
    await call('DELETE', `/v1/sandboxes/${sbx.id}`);
  });

  test('SSE: stored events after Last-Event-ID, then live ones', async () => {
    const first = await create({});
    await burrow.services.events.flush();
    const before = await events(`sandboxId=${first.id}`);
    const lastId = before.at(-1)?.id ?? '0';
    const url = await burrow.app.listen({ host: '127.0.0.1', port: 0 });
    const controller = new AbortController();
    const res = await fetch(`${url}/v1/events/stream`, {
      headers: { ...admin, 'last-event-id': lastId },
      signal: controller.signal,
    });
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    await call('DELETE', `/v1/sandboxes/${first.id}`);
    const reader = res.body?.getReader();
    let text = '';
    const deadline = Date.now() + 10_000;
    while (!text.includes(`"sandboxId":"${first.id}"`) && Date.now() < deadline) {
      const { value, done } = (await reader?.read()) ?? { done: true, value: undefined };
      if (done) break;
      text += Buffer.from(value).toString();
    }
    controller.abort();
    expect(text).toMatch(/event: deleted\n/);
    const ids = [...text.matchAll(/^id: (\d+)$/gm)].map((m) => Number(m[1]));
    expect(ids.every((id) => id > Number(lastId))).toBe(true);
  });

  test('SSE: a Last-Event-ID that is not an event id is refused with the envelope (it used to replay everything)', async () => {
    for (const bad of ['abc', '-5', '99999999999999999999', '1; DROP']) {
      for (const [path, accept] of [
        ['/v1/events/stream', '*/*'],
        ['/v1/events', 'text/event-stream'],
      ] as const) {
        const res = await burrow.app.inject({
          method: 'GET',
          url: path,
          headers: { ...admin, accept, 'last-event-id': bad },
        });
        expect(res.statusCode, `${path} ${bad}`).toBe(400);
        const body = res.json() as { error: { code: string; hint: string; requestId: string } };
        expect(body.error).toMatchObject({ code: 'invalid_request', requestId: expect.any(String) });
        expect(body.error.hint).toContain('id:');
      }
    }
  });
});
