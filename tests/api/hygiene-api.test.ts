import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Harness, startHarness } from './api-harness.js';

/**
 * Hygiene over the FAKE driver (fast layer) on a manual clock: orphan grace, deletion backoff, vanished resources,
 * quarantine, reset and /metrics. The real-runsc side is in hygiene-runsc.test.ts.
 */
const GRACE_MS = 60_000;
let now = Date.parse('2026-11-29T12:00:00.000Z');
const clock = { nowMs: () => now };
let h: Harness;
let member: Record<string, string> = {};

const call = async (
  method: 'GET' | 'POST' | 'PUT' | 'DELETE',
  url: string,
  options: { payload?: object; headers?: Record<string, string> } = {},
) => {
  const res = await h.burrow.app.inject({
    method,
    url: url.startsWith('/metrics') ? url : `/v1${url}`,
    headers: options.headers ?? h.admin,
    ...(options.payload ? { payload: options.payload } : {}),
  });
  let body: Record<string, unknown> = {};
  try {
    body = res.body ? (JSON.parse(res.body) as Record<string, unknown>) : {};
  } catch {
    body = { text: res.body };
  }
  return { status: res.statusCode, body, text: res.body, headers: res.headers };
};
const create = async (extra: object = {}, headers?: Record<string, string>) => {
  const res = await call('POST', '/sandboxes', { payload: extra, ...(headers ? { headers } : {}) });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.id as string;
};
/** Write a file through the files API (the fake driver's exec runs on the host: never write paths with it). */
const put = async (id: string, path: string, text: string, headers?: Record<string, string>) => {
  const res = await h.burrow.app.inject({
    method: 'PUT',
    url: `/v1/sandboxes/${id}/files/content?path=${encodeURIComponent(path)}`,
    headers: { ...(headers ?? h.admin), 'content-type': 'application/octet-stream' },
    payload: Buffer.from(text),
  });
  expect(res.statusCode, res.body).toBe(200);
};
const errorCode = (body: Record<string, unknown>) => (body.error as { code?: string } | undefined)?.code;
const fakeCreate = (id: string) =>
  h.driver.create({
    sandboxId: id,
    template: { id: 'x', rootfsDir: '/nonexistent' },
    resources: { cpuCount: 1, memoryMiB: 64, diskMiB: 64 },
    hostname: 'x',
  });

beforeAll(async () => {
  h = await startHarness({ orphanGraceMs: GRACE_MS, clock });
  const key = await call('POST', '/keys', { payload: { name: 'member', role: 'member' } });
  expect(key.status, JSON.stringify(key.body)).toBe(201);
  member = { authorization: `Bearer ${key.body.secret as string}` };
});
afterAll(async () => {
  await h?.close();
});

describe('orphans and leaks', () => {
  test('host resources no row owns are found at once and reaped only after the grace period', async () => {
    const orphan = 'sbx_orphangrace0000000a';
    await fakeCreate(orphan);
    const first = await h.burrow.reconciler.reconcileOnce();
    expect(first.orphansFound).toEqual([orphan]);
    expect(first.orphansReaped).toEqual([]);
    expect((await h.driver.listHostResources()).sandboxIds).toContain(orphan);
    now += GRACE_MS - 1;
    expect((await h.burrow.reconciler.reconcileOnce()).orphansReaped).toEqual([]);
    now += 1;
    const due = await h.burrow.reconciler.reconcileOnce();
    expect(due.orphansReaped).toEqual([orphan]);
    expect(due.orphansFound).toEqual([]);
    expect((await h.driver.listHostResources()).sandboxIds).not.toContain(orphan);
    const metrics = await call('GET', '/metrics');
    expect(metrics.text).toMatch(/burrow_leaked_resources_found_total\{kind="directory"\} 1/);
    expect(metrics.text).toMatch(/burrow_leaked_resources_reaped_total\{kind="directory"\} 1/);
  });

  test('an operation in flight (its lock held, its row not written yet) is never reaped, however long', async () => {
    const inFlight = 'sbx_inflightcreate00000';
    let release = () => {};
    const held = h.burrow.services.sandboxes.persistence; // any service shares the one mutex via the reconciler
    expect(held).toBeDefined();
    const mutex = (
      h.burrow.reconciler as unknown as {
        deps: { mutex: import('../../packages/server/src/util/keyed-mutex.js').KeyedMutex };
      }
    ).deps.mutex;
    const holding = mutex.run(inFlight, async () => {
      await fakeCreate(inFlight);
      await new Promise<void>((resolve) => {
        release = resolve;
      });
    });
    await new Promise((r) => setTimeout(r, 20));
    for (let i = 0; i < 3; i += 1) {
      now += 10 * GRACE_MS;
      const report = await h.burrow.reconciler.reconcileOnce();
      expect(report.orphansReaped).not.toContain(inFlight);
      // Nor counted as a leak found: it may still get its row.
      expect(report.orphansFound).not.toContain(inFlight);
    }
    expect((await h.driver.listHostResources()).sandboxIds).toContain(inFlight);
    release();
    await holding;
    // Released without a row (a create that crashed): found now, the grace starts now, then it goes.
    const found = await h.burrow.reconciler.reconcileOnce();
    expect(found.orphansFound).toContain(inFlight);
    expect(found.orphansReaped).not.toContain(inFlight);
    now += GRACE_MS;
    expect((await h.burrow.reconciler.reconcileOnce()).orphansReaped).toContain(inFlight);
  });

  test('a delete that ends between the host listing and the row listing is not a leak found', async () => {
    const id = await create();
    const original = h.driver.listHostResources.bind(h.driver);
    // The reconciler's host listing sees the sandbox; its delete then finishes before the rows are read.
    h.driver.listHostResources = async () => {
      const listed = await original();
      h.driver.listHostResources = original;
      expect(listed.sandboxIds).toContain(id);
      expect((await call('DELETE', `/sandboxes/${id}`)).status).toBe(204);
      return listed;
    };
    try {
      const report = await h.burrow.reconciler.reconcileOnce();
      expect(report.orphansFound).not.toContain(id);
      expect(h.driver.listHostResources).toBe(original);
    } finally {
      h.driver.listHostResources = original;
    }
  });

  test('a create whose row is written after the pass read the rows is not a leak found', async () => {
    const id = await create();
    const rows = h.burrow.store.sandboxes;
    const listRows = rows.listAcrossTenants.bind(rows);
    const listHost = h.driver.listHostResources.bind(h.driver);
    let stale = 0;
    // Right after the pass's host listing, its row listing is one from before this create wrote its row.
    h.driver.listHostResources = async () => {
      const listed = await listHost();
      h.driver.listHostResources = listHost;
      rows.listAcrossTenants = async () => {
        rows.listAcrossTenants = listRows;
        stale += 1;
        return (await listRows()).filter((row) => row.id !== id);
      };
      return listed;
    };
    try {
      const report = await h.burrow.reconciler.reconcileOnce();
      expect(stale).toBe(1);
      expect(report.orphansFound).not.toContain(id);
      expect((await call('GET', `/sandboxes/${id}`)).status).toBe(200);
    } finally {
      h.driver.listHostResources = listHost;
      rows.listAcrossTenants = listRows;
    }
  });

  test('with a grace of 0, a delete that ends between the two listings is neither found nor reaped', async () => {
    const h0 = await startHarness({ orphanGraceMs: 0 });
    try {
      const res = await h0.burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: h0.admin, payload: {} });
      expect(res.statusCode, res.body).toBe(201);
      const id = (JSON.parse(res.body) as { id: string }).id;
      const original = h0.driver.listHostResources.bind(h0.driver);
      const deletes: string[] = [];
      const deleteOriginal = h0.driver.delete.bind(h0.driver);
      h0.driver.delete = async (sandboxId: string) => {
        deletes.push(sandboxId);
        return deleteOriginal(sandboxId);
      };
      h0.driver.listHostResources = async () => {
        const listed = await original();
        h0.driver.listHostResources = original;
        const del = await h0.burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${id}`, headers: h0.admin });
        expect(del.statusCode, del.body).toBe(204);
        return listed;
      };
      const report = await h0.burrow.reconciler.reconcileOnce();
      expect(report.orphansFound).not.toContain(id);
      expect(report.orphansReaped).not.toContain(id);
      // The user's delete, once; the reconciler did not delete the id again.
      expect(deletes).toEqual([id]);
    } finally {
      await h0.close();
    }
  });

  test('a failed deletion stays `deleting` and is retried with backoff until verified', async () => {
    const id = await create();
    const original = h.driver.delete.bind(h.driver);
    let attempts = 0;
    h.driver.delete = async (sandboxId: string) => {
      if (sandboxId === id) {
        attempts += 1;
        if (attempts <= 2) throw new Error('injected: a mount is busy');
      }
      return original(sandboxId);
    };
    try {
      const res = await call('DELETE', `/sandboxes/${id}`);
      expect(res.status).toBe(500);
      expect((await h.burrow.store.sandboxes.getAcrossTenants(id))?.state).toBe('deleting');
      const failed = await h.burrow.reconciler.reconcileOnce();
      expect(failed.failures.map((f) => f.id)).toContain(id);
      expect(attempts).toBe(2);
      // Within the backoff (1 s after the first failure) nothing is tried.
      await h.burrow.reconciler.reconcileOnce();
      expect(attempts).toBe(2);
      now += 1_000;
      const done = await h.burrow.reconciler.reconcileOnce();
      expect(attempts).toBe(3);
      expect(done.finished).toContain(id);
      expect(await h.burrow.store.sandboxes.getAcrossTenants(id)).toBeNull();
      expect((await h.driver.listHostResources()).sandboxIds).not.toContain(id);
      const metrics = await call('GET', '/metrics');
      expect(metrics.text).toMatch(/burrow_cleanup_lag_seconds_count [1-9]/);
    } finally {
      h.driver.delete = original;
    }
  });

  test('a paused sandbox whose resources vanished gets an error condition with the reason', async () => {
    const id = await create();
    expect((await call('POST', `/sandboxes/${id}/pause`)).status).toBe(200);
    await h.driver.vanish(id);
    const report = await h.burrow.reconciler.reconcileOnce();
    expect(report.markedError).toContain(id);
    const info = await call('GET', `/sandboxes/${id}`);
    expect(info.body.state).toBe('error');
    const conditions = info.body.conditions as Array<{ reason: string; message: string }>;
    expect(conditions.at(-1)?.reason).toBe('ResourcesMissing');
    expect(conditions.at(-1)?.message).toMatch(/delete it/);
    expect((await call('DELETE', `/sandboxes/${id}`)).status).toBe(204);
  });
});

describe('quarantine', () => {
  test('refuses exec, writes, commands, fork, reset, delete to a member key; reads and admin still work', async () => {
    const id = await create({ timeoutMs: 5_000 }, member);
    const asMember = { headers: member };
    await put(id, '/root/a', 'x\n', member);
    const q = await call('POST', `/sandboxes/${id}/quarantine`, {
      ...asMember,
      payload: { reason: 'suspicious egress' },
    });
    expect(q.status, JSON.stringify(q.body)).toBe(200);
    expect(q.body.quarantine).toMatchObject({ reason: 'suspicious egress' });
    const refused: Array<[method: 'POST' | 'PUT' | 'DELETE', url: string, payload?: object]> = [
      ['POST', `/sandboxes/${id}/exec`, { cmd: 'true' }],
      ['PUT', `/sandboxes/${id}/files/content?path=/root/b`, undefined],
      ['POST', `/sandboxes/${id}/files/mkdir`, { path: '/root/d' }],
      ['POST', `/sandboxes/${id}/commands`, { cmd: 'sleep 1' }],
      ['POST', `/sandboxes/${id}/fork`, { count: 1 }],
      ['POST', `/sandboxes/${id}/reset`, { to: 'template' }],
      ['POST', `/sandboxes/${id}/start`, undefined],
      ['DELETE', `/sandboxes/${id}`, undefined],
    ];
    for (const [method, url, payload] of refused) {
      const res = await call(method, url, { ...asMember, ...(payload ? { payload } : {}) });
      expect(res.status, `${method} ${url}: ${JSON.stringify(res.body)}`).toBe(409);
      expect(errorCode(res.body)).toBe('sandbox_quarantined');
    }
    // Reads and ways to halt it still work for the member.
    const read = await call('GET', `/sandboxes/${id}/files/content?path=/root/a`, asMember);
    expect(read.status).toBe(200);
    expect(read.text).toBe('x\n');
    expect((await call('GET', `/sandboxes/${id}`, asMember)).body.quarantine).not.toBeNull();
    // Policies leave it alone: its TTL ran out long ago.
    now += 60_000;
    const report = await h.burrow.reconciler.reconcileOnce();
    expect(report.expired).not.toContain(id);
    expect((await call('GET', `/sandboxes/${id}`, asMember)).status).toBe(200);
    // An admin key may still exec; only an admin releases.
    expect((await call('POST', `/sandboxes/${id}/exec`, { payload: { cmd: 'true' } })).status).toBe(200);
    const byMember = await call('POST', `/sandboxes/${id}/quarantine/release`, asMember);
    expect(byMember.status).toBe(403);
    const released = await call('POST', `/sandboxes/${id}/quarantine/release`);
    expect(released.status).toBe(200);
    expect(released.body.quarantine).toBeNull();
    const conditions = released.body.conditions as Array<{ type: string; reason: string }>;
    expect(conditions.filter((c) => c.type === 'Quarantined').map((c) => c.reason)).toEqual([
      'Quarantined',
      'Released',
    ]);
    expect((await call('POST', `/sandboxes/${id}/exec`, { ...asMember, payload: { cmd: 'true' } })).status).toBe(200);
    expect((await call('DELETE', `/sandboxes/${id}`, asMember)).status).toBe(204);
  });

  test("an admin key releases another tenant's quarantined sandbox (a member there can neither release nor delete it)", async () => {
    const key = await call('POST', '/keys', { payload: { name: 'other-member', tenantId: 'other', role: 'member' } });
    expect(key.status, JSON.stringify(key.body)).toBe(201);
    const other = { authorization: `Bearer ${key.body.secret as string}` };
    const id = await create({}, other);
    expect(
      (await call('POST', `/sandboxes/${id}/quarantine`, { headers: other, payload: { reason: 'r' } })).status,
    ).toBe(200);
    expect((await call('POST', `/sandboxes/${id}/quarantine/release`, { headers: other })).status).toBe(403);
    expect(errorCode((await call('DELETE', `/sandboxes/${id}`, { headers: other })).body)).toBe('sandbox_quarantined');
    // The admin key (tenant default) used to get sandbox_not_found here: the sandbox was stuck.
    const released = await call('POST', `/sandboxes/${id}/quarantine/release`);
    expect(released.status, JSON.stringify(released.body)).toBe(200);
    expect(released.body.quarantine).toBeNull();
    expect((await call('DELETE', `/sandboxes/${id}`, { headers: other })).status).toBe(204);
    expect((await call('POST', '/sandboxes/sbx_00000000000000000000/quarantine/release')).status).toBe(404);
  });

  test('bad input gets the envelope', async () => {
    const id = await create();
    const long = await call('POST', `/sandboxes/${id}/quarantine`, { payload: { reason: 'x'.repeat(501) } });
    expect(long.status).toBe(400);
    expect(errorCode(long.body)).toBe('invalid_request');
    const extra = await call('POST', `/sandboxes/${id}/reset`, { payload: { to: 'nowhere' } });
    expect(extra.status).toBe(400);
    const missing = await call('POST', `/sandboxes/${id}/reset`, { payload: { to: 'snapshot', snapshot: 'nope' } });
    expect(missing.status).toBe(404);
    expect(errorCode(missing.body)).toBe('snapshot_not_found');
    const unknown = await call('POST', '/sandboxes/sbx_00000000000000000000/quarantine', { payload: {} });
    expect(unknown.status).toBe(404);
    const inspect = await call('GET', `/sandboxes/${id}/inspect?limit=0`);
    expect(inspect.status).toBe(400);
    expect((await call('DELETE', `/sandboxes/${id}`)).status).toBe(204);
  });
});

describe('reset', () => {
  test('to the template: same id, fresh disk; to a snapshot: its files', async () => {
    const id = await create({ labels: { keep: 'me' } });
    await put(id, '/root/one', 'one\n');
    const snap = await call('POST', `/sandboxes/${id}/snapshots`, { payload: { name: 'hyg-one', memory: false } });
    expect(snap.status, JSON.stringify(snap.body)).toBe(201);
    await put(id, '/root/two', 'two\n');
    const reset = await call('POST', `/sandboxes/${id}/reset`, { payload: { to: 'template' } });
    expect(reset.status, JSON.stringify(reset.body)).toBe(200);
    expect(reset.body).toMatchObject({ id, state: 'running', labels: { keep: 'me' } });
    expect((await call('GET', `/sandboxes/${id}/files/exists?path=/root/one`)).body.exists).toBe(false);
    const toSnap = await call('POST', `/sandboxes/${id}/reset`, {
      payload: { to: 'snapshot', snapshot: 'hyg-one', memory: false },
    });
    expect(toSnap.status, JSON.stringify(toSnap.body)).toBe(200);
    expect((toSnap.body.lineage as { snapshotId: string }).snapshotId).toBe(snap.body.id);
    expect((await call('GET', `/sandboxes/${id}/files/content?path=/root/one`)).text).toBe('one\n');
    expect((await call('GET', `/sandboxes/${id}/files/exists?path=/root/two`)).body.exists).toBe(false);
    const memory = await call('POST', `/sandboxes/${id}/reset`, { payload: { to: 'snapshot', snapshot: 'hyg-one' } });
    expect(memory.status).toBe(400);
    expect(errorCode(memory.body)).toBe('invalid_request');
    expect((await call('DELETE', `/sandboxes/${id}`)).status).toBe(204);
    expect((await call('DELETE', '/snapshots/hyg-one')).status).toBe(204);
  });
});

describe('/metrics', () => {
  test('admin only; counts states, creates, latencies; each server has its own registry', async () => {
    expect((await call('GET', '/metrics', { headers: {} })).status).toBe(401);
    const denied = await call('GET', '/metrics', { headers: member });
    expect(denied.status).toBe(403);
    const id = await create();
    expect((await call('POST', `/sandboxes/${id}/exec`, { payload: { cmd: 'true' } })).status).toBe(200);
    const res = await call('GET', '/metrics');
    expect(res.status).toBe(200);
    expect(String(res.headers['content-type'])).toMatch(/^text\/plain/);
    const running = (await h.burrow.store.sandboxes.listAcrossTenants()).filter((r) => r.state === 'running').length;
    expect(res.text).toContain(`burrow_sandboxes{state="running"} ${running}`);
    expect(res.text).toMatch(/burrow_sandbox_creates_total\{result="success"\} [1-9]/);
    expect(res.text).toMatch(/burrow_operation_duration_seconds_count\{operation="create"\} [1-9]/);
    expect(res.text).toMatch(/burrow_time_to_first_command_seconds_count [1-9]/);
    expect(res.text).toMatch(/burrow_disk_bytes\{tenant="default"\}/);
    const other = await startHarness();
    try {
      const fresh = await other.burrow.app.inject({ method: 'GET', url: '/metrics', headers: other.admin });
      expect(fresh.body).toMatch(/burrow_sandbox_creates_total\{result="success"\} 0/);
    } finally {
      await other.close();
    }
    expect((await call('DELETE', `/sandboxes/${id}`)).status).toBe(204);
  });
});
