import { ErrorEnvelopeSchema, SandboxSchema } from '@burrow/contract';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Harness, startHarness } from './api-harness.js';

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ bodyLimitBytes: 64 * 1024 });
});
afterAll(async () => {
  await h?.close();
});

function expectError(res: LightMyRequestResponse, status: number, code: string) {
  expect(res.statusCode, res.body).toBe(status);
  const env = ErrorEnvelopeSchema.parse(res.json());
  expect(env.error.code).toBe(code);
  expect(env.error.requestId).toBe(res.headers['x-request-id']);
  return env;
}

async function create(body: Record<string, unknown> = {}, headers = h.admin) {
  const res = await h.burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers, payload: body });
  expect(res.statusCode, res.body).toBe(201);
  return SandboxSchema.parse(res.json());
}

const UNKNOWN_ID = 'sbx_00000000000000000000';

describe('sandboxes', () => {
  test('create → running, get, exec, delete removes host resources and the row', async () => {
    const sbx = await create({ env: { A: '1' }, labels: { team: 'x' }, cpuCount: 0.5 });
    expect(sbx.state).toBe('running');
    expect(sbx.resources).toEqual({ cpuCount: 0.5, memoryMiB: 512, diskMiB: 2048 });
    expect((await h.driver.listHostResources()).sandboxIds).toContain(sbx.id);
    const got = await h.burrow.app.inject({ method: 'GET', url: `/v1/sandboxes/${sbx.id}`, headers: h.admin });
    expect(got.json().id).toBe(sbx.id);
    const del = await h.burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${sbx.id}`, headers: h.admin });
    expect(del.statusCode).toBe(204);
    expect((await h.driver.listHostResources()).sandboxIds).not.toContain(sbx.id);
    expectError(
      await h.burrow.app.inject({ method: 'GET', url: `/v1/sandboxes/${sbx.id}`, headers: h.admin }),
      404,
      'sandbox_not_found',
    );
    expectError(
      await h.burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${sbx.id}`, headers: h.admin }),
      404,
      'sandbox_not_found',
    );
  });

  test('a create that fails half-way leaves no row and no host resources', async () => {
    h.driver.failAllCreates = true;
    try {
      const before = await h.burrow.store.sandboxes.listAcrossTenants();
      const res = await h.burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: h.admin, payload: {} });
      expectError(res, 500, 'runtime_error');
      expect((await h.burrow.store.sandboxes.listAcrossTenants()).length).toBe(before.length);
      const host = (await h.driver.listHostResources()).sandboxIds;
      expect(host.filter((id) => !before.some((b) => b.id === id))).toEqual([]);
    } finally {
      h.driver.failAllCreates = false;
    }
  });

  test.each([
    [{ template: 'nope' }, 404, 'template_not_found'],
    [{ template: 'Bad Name' }, 400, 'invalid_request'],
    [{ cpuCount: 0 }, 400, 'invalid_request'],
    [{ cpuCount: -1 }, 400, 'invalid_request'],
    [{ cpuCount: 3 }, 400, 'invalid_request'],
    [{ memoryMiB: 1e9 }, 400, 'invalid_request'],
    [{ memoryMiB: 8192 }, 400, 'invalid_request'],
    [{ diskMiB: 1_000_000 }, 400, 'invalid_request'],
    [{ diskMiB: 1.5 }, 400, 'invalid_request'],
    [{ timeoutMs: 5 }, 400, 'invalid_request'],
    [{ unknownField: 1 }, 400, 'invalid_request'],
    [{ env: { '1BAD': 'x' } }, 400, 'invalid_request'],
    [{ cwd: 'relative' }, 400, 'invalid_request'],
  ])('create %j → %i %s', async (body, status, code) => {
    const env = expectError(
      await h.burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: h.admin, payload: body }),
      status,
      code,
    );
    expect(env.error.hint).toBeTruthy();
  });

  test('invalid JSON, wrong content type and oversized bodies get the envelope', async () => {
    const headers = { ...h.admin, 'content-type': 'application/json' };
    expectError(
      await h.burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers, payload: '{"template":' }),
      400,
      'invalid_json',
    );
    // Valid JSON with a __proto__ key is refused (prototype pollution); the message says so ("not valid JSON" alone
    // would mislead).
    const proto = expectError(
      await h.burrow.app.inject({
        method: 'POST',
        url: '/v1/sandboxes',
        headers,
        payload: '{"template":"base","__proto__":{"x":1}}',
      }),
      400,
      'invalid_json',
    );
    expect(proto.error.message).toContain('__proto__');
    expectError(
      await h.burrow.app.inject({
        method: 'POST',
        url: '/v1/sandboxes',
        headers: { ...h.admin, 'content-type': 'text/plain' },
        payload: 'hi',
      }),
      400,
      'invalid_request',
    );
    expectError(
      await h.burrow.app.inject({
        method: 'POST',
        url: '/v1/sandboxes',
        headers: { ...h.admin, 'content-type': 'application/xml' },
        payload: '<a/>',
      }),
      400,
      'invalid_request',
    );
    const big = JSON.stringify({ env: { A: 'x'.repeat(100 * 1024) } });
    expectError(
      await h.burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers, payload: big }),
      413,
      'payload_too_large',
    );
    const health = await h.burrow.app.inject({ method: 'GET', url: '/v1/health' });
    expect(health.json().status).toBe('ok');
  });

  test('malformed and unknown ids, unknown routes', async () => {
    for (const id of ['sbx_short', 'abc', 'sbx_0000000000000000000I', `sbx_${'0'.repeat(21)}`]) {
      expectError(
        await h.burrow.app.inject({ method: 'GET', url: `/v1/sandboxes/${id}`, headers: h.admin }),
        400,
        'invalid_request',
      );
    }
    expectError(
      await h.burrow.app.inject({ method: 'GET', url: `/v1/sandboxes/${UNKNOWN_ID}`, headers: h.admin }),
      404,
      'sandbox_not_found',
    );
    expectError(
      await h.burrow.app.inject({ method: 'GET', url: '/v1/nothing-here', headers: h.admin }),
      404,
      'route_not_found',
    );
    expectError(
      await h.burrow.app.inject({ method: 'PATCH', url: '/v1/sandboxes', headers: h.admin }),
      404,
      'route_not_found',
    );
  });

  test('exec: exit code, env, cwd, stdin, argv, timeout, truncation, not running', async () => {
    const sbx = await create({ env: { GREETING: 'hello' } });
    const exec = (payload: Record<string, unknown>) =>
      h.burrow.app.inject({ method: 'POST', url: `/v1/sandboxes/${sbx.id}/exec`, headers: h.admin, payload });
    const r1 = (await exec({ cmd: 'echo $GREETING $EXTRA; echo oops >&2; exit 7', env: { EXTRA: 'there' } })).json();
    expect(Buffer.from(r1.stdout, 'base64').toString()).toBe('hello there\n');
    expect(Buffer.from(r1.stderr, 'base64').toString()).toBe('oops\n');
    expect(r1.exitCode).toBe(7);
    expect(r1.signal).toBeNull();
    const r2 = (await exec({ cmd: ['/bin/cat'], stdin: Buffer.from('bytes\0in').toString('base64') })).json();
    expect(Buffer.from(r2.stdout, 'base64').toString()).toBe('bytes\0in');
    const unpadded = (await exec({ cmd: ['/bin/cat'], stdin: 'Ynl0ZXMAaW4' })).json();
    expect(Buffer.from(unpadded.stdout, 'base64').toString()).toBe('bytes\0in');
    const r3 = (await exec({ cmd: 'sleep 5', timeoutMs: 200 })).json();
    expect(r3).toMatchObject({ timedOut: true, exitCode: null, signal: 'SIGKILL' });
    expect(r3.durationMs).toBeLessThan(4000);
    const r4 = (await exec({ cmd: 'pwd', cwd: '/tmp' })).json();
    expect(Buffer.from(r4.stdout, 'base64').toString().trim().endsWith('/tmp')).toBe(true);
    expectError(await exec({ cmd: '' }), 400, 'invalid_request');
    expectError(await exec({ cmd: [] }), 400, 'invalid_request');
    expectError(await exec({ cmd: 'true', timeoutMs: 0 }), 400, 'invalid_request');
    const notBase64 = await exec({ cmd: 'true', stdin: 'Ynl0-ZXM' });
    expectError(notBase64, 400, 'invalid_request');
    expect(notBase64.json().error.message).toContain('/stdin must be standard base64');
    expectError(
      await h.burrow.app.inject({
        method: 'POST',
        url: `/v1/sandboxes/${UNKNOWN_ID}/exec`,
        headers: h.admin,
        payload: { cmd: 'true' },
      }),
      404,
      'sandbox_not_found',
    );
    await h.driver.vanish(sbx.id);
    expectError(await exec({ cmd: 'true' }), 409, 'sandbox_not_running');
    const got = (await h.burrow.app.inject({ method: 'GET', url: `/v1/sandboxes/${sbx.id}`, headers: h.admin })).json();
    expect(got.state).toBe('error');
    expect(got.conditions.at(-1)).toMatchObject({ type: 'Ready', status: 'false', reason: 'ContainerMissing' });
    expect(
      (await h.burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${sbx.id}`, headers: h.admin })).statusCode,
    ).toBe(204);
  });

  test('exec output over the cap is truncated', async () => {
    const sbx = await create();
    const res = await h.burrow.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${sbx.id}/exec`,
      headers: h.admin,
      payload: { cmd: 'head -c 17000000 /dev/zero' },
    });
    const body = res.json();
    expect(body.truncated).toBe(true);
    expect(Buffer.from(body.stdout, 'base64').length).toBe(16 * 1024 * 1024);
    await h.burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${sbx.id}`, headers: h.admin });
  });

  test('runtime events become conditions', async () => {
    const sbx = await create();
    h.driver.injectEvent(sbx.id, { type: 'OOMKilled', reason: 'MemoryLimit', message: 'a process was killed' });
    const got = (await h.burrow.app.inject({ method: 'GET', url: `/v1/sandboxes/${sbx.id}`, headers: h.admin })).json();
    expect(got.conditions).toEqual([
      expect.objectContaining({ type: 'OOMKilled', reason: 'MemoryLimit', status: 'true' }),
    ]);
    expect(got.state).toBe('running');
    await h.burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${sbx.id}`, headers: h.admin });
  });

  test('list: label AND filters, state filter, pagination never skips or repeats', async () => {
    const made: string[] = [];
    for (let i = 0; i < 7; i++)
      made.push((await create({ labels: { suite: 'page', parity: i % 2 === 0 ? 'even' : 'odd' } })).id);
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const url: string = `/v1/sandboxes?label=suite=page&limit=3${cursor ? `&cursor=${cursor}` : ''}`;
      const page = (await h.burrow.app.inject({ method: 'GET', url, headers: h.admin })).json();
      seen.push(...page.items.map((s: { id: string }) => s.id));
      cursor = page.nextCursor;
      pages++;
    } while (cursor !== null && pages < 10);
    expect(seen).toEqual(made);
    const even = (
      await h.burrow.app.inject({
        method: 'GET',
        url: '/v1/sandboxes?label=suite=page&label=parity=even',
        headers: h.admin,
      })
    ).json();
    expect(even.items.map((s: { id: string }) => s.id)).toEqual(made.filter((_, i) => i % 2 === 0));
    const none = (
      await h.burrow.app.inject({ method: 'GET', url: '/v1/sandboxes?label=suite=page&state=paused', headers: h.admin })
    ).json();
    expect(none.items).toEqual([]);
    expectError(
      await h.burrow.app.inject({ method: 'GET', url: '/v1/sandboxes?cursor=garbage', headers: h.admin }),
      400,
      'invalid_request',
    );
    expectError(
      await h.burrow.app.inject({ method: 'GET', url: '/v1/sandboxes?label=novalue', headers: h.admin }),
      400,
      'invalid_request',
    );
    expectError(
      await h.burrow.app.inject({ method: 'GET', url: '/v1/sandboxes?limit=0', headers: h.admin }),
      400,
      'invalid_request',
    );
    expectError(
      await h.burrow.app.inject({ method: 'GET', url: '/v1/sandboxes?state=bogus', headers: h.admin }),
      400,
      'invalid_request',
    );
    // A misspelt or unknown query parameter is refused (it used to be ignored: this listed every sandbox).
    const typo = expectError(
      await h.burrow.app.inject({ method: 'GET', url: '/v1/sandboxes?lable=suite=page', headers: h.admin }),
      400,
      'invalid_request',
    );
    expect(typo.error.message).toContain("'lable'");
    expect(typo.error.hint).toContain('label');
    expectError(
      await h.burrow.app.inject({ method: 'GET', url: `/v1/sandboxes/${made[0]}?verbose=1`, headers: h.admin }),
      400,
      'invalid_request',
    );
    for (const id of made)
      await h.burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${id}`, headers: h.admin });
  });

  test('concurrent delete and exec on one sandbox leave a consistent end state', async () => {
    const sbx = await create();
    const results = await Promise.all([
      h.burrow.app.inject({
        method: 'POST',
        url: `/v1/sandboxes/${sbx.id}/exec`,
        headers: h.admin,
        payload: { cmd: 'true' },
      }),
      h.burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${sbx.id}`, headers: h.admin }),
      h.burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${sbx.id}`, headers: h.admin }),
    ]);
    const codes = results.map((r) => r.statusCode).sort();
    expect(codes.filter((c) => c === 204)).toHaveLength(1);
    expect(codes).toContain(404);
    expect(await h.burrow.store.sandboxes.getAcrossTenants(sbx.id)).toBeNull();
    expect((await h.driver.listHostResources()).sandboxIds).not.toContain(sbx.id);
  });
});
