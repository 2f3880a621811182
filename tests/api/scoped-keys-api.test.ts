import { ErrorEnvelopeSchema, SandboxSchema } from '@burrow/contract';
import type { LightMyRequestResponse } from 'fastify';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { buildApp } from '../../packages/server/src/http/app.js';
import { ROUTE_ACCESS } from '../../packages/server/src/http/route-scopes.js';
import { assertRouteHasAccess } from '../../packages/server/src/http/scope-guard.js';
import { hasFullRights } from '../../packages/server/src/services/key-scopes.js';
import type { Clock } from '../../packages/server/src/util/clock.js';
import { type Harness, startHarness } from './api-harness.js';

// A settable clock, starting at the wall clock's now (expiry is checked against it).
let nowMs = Date.now();
const clock: Clock = { nowMs: () => nowMs };
let h: Harness;
beforeAll(async () => {
  h = await startHarness({ clock });
});
afterAll(async () => {
  await h?.close();
});

const bearer = (secret: string) => ({ authorization: `Bearer ${secret}` });
type Headers = Record<string, string>;

async function call(method: string, url: string, headers: Headers, payload?: unknown) {
  return h.burrow.app.inject({
    method: method as 'GET',
    url: `/v1${url}`,
    headers,
    ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }),
  });
}
function expectError(res: LightMyRequestResponse, status: number, code: string) {
  expect(res.statusCode, res.body).toBe(status);
  expect(ErrorEnvelopeSchema.parse(res.json()).error.code).toBe(code);
}
async function createSandbox(labels: Record<string, string> = {}) {
  const res = await call('POST', '/sandboxes', h.admin, { labels });
  expect(res.statusCode, res.body).toBe(201);
  return SandboxSchema.parse(res.json()).id;
}
async function newKey(body: Record<string, unknown>, headers: Headers = h.admin) {
  const res = await call('POST', '/keys', headers, body);
  expect(res.statusCode, res.body).toBe(201);
  return res.json() as { key: Record<string, unknown> & { id: string }; secret: string };
}
const writeFile = (id: string, headers: Headers) =>
  h.burrow.app.inject({
    method: 'PUT',
    url: `/v1/sandboxes/${id}/files/content?path=${encodeURIComponent('/root/a.txt')}`,
    headers: { ...headers, 'content-type': 'application/octet-stream' },
    payload: Buffer.from('hello'),
  });

describe('route scope table', () => {
  test('every entry names a registered route, and every registered route has an entry', async () => {
    for (const key of Object.keys(ROUTE_ACCESS)) {
      const [method, url] = key.split(' ') as [string, string];
      expect(h.burrow.app.hasRoute({ method: method as 'GET', url }), key).toBe(true);
    }
    // The app refuses to build with a route missing from the table: take one entry out and build again.
    const table = ROUTE_ACCESS as Record<string, unknown>;
    const saved = table['POST /v1/sandboxes/:id/fork'];
    delete table['POST /v1/sandboxes/:id/fork'];
    try {
      await expect(buildApp({ services: h.burrow.services, logger: pino({ level: 'silent' }) })).rejects.toThrow(
        /POST \/v1\/sandboxes\/:id\/fork has no entry in ROUTE_ACCESS/,
      );
    } finally {
      table['POST /v1/sandboxes/:id/fork'] = saved;
    }
    expect(() => assertRouteHasAccess(['GET', 'HEAD'], '/v1/sandboxes')).not.toThrow();
    expect(() => assertRouteHasAccess('POST', '/v1/unlisted')).toThrow(/no entry/);
  });
});

describe('a key restricted to one sandbox', () => {
  test('runs commands and uses files in it, gets 404 for every other sandbox and 403 for the rest', async () => {
    const a = await createSandbox();
    const b = await createSandbox();
    const { key, secret } = await newKey({
      name: 'agent',
      scopes: ['commands', 'files'],
      restriction: { type: 'sandbox', sandboxId: a },
      ttlMs: 3_600_000,
    });
    expect(key).toMatchObject({
      scopes: ['commands', 'files'],
      restriction: { type: 'sandbox', sandboxId: a },
      expiresAt: new Date(nowMs + 3_600_000).toISOString(),
      lastUsedAt: null,
    });
    const agent = bearer(secret);
    expect((await call('POST', `/sandboxes/${a}/exec`, agent, { cmd: 'true' })).statusCode).toBe(200);
    expect((await writeFile(a, agent)).statusCode).toBe(200);
    const read = await call('GET', `/sandboxes/${a}/files/content?path=${encodeURIComponent('/root/a.txt')}`, agent);
    expect(read.body).toBe('hello');

    // Sandbox B answers exactly as an unknown id, whatever the call.
    for (const [method, url] of [
      ['GET', `/sandboxes/${b}`],
      ['POST', `/sandboxes/${b}/exec`],
      ['DELETE', `/sandboxes/${b}`],
      ['POST', `/sandboxes/${b}/fork`],
      ['GET', `/sandboxes/${b}/files?path=%2F`],
    ] as const) {
      const res = await call(method, url, agent, method === 'POST' ? { cmd: 'true' } : undefined);
      expectError(res, 404, 'sandbox_not_found');
      expect(res.json().error.message).toBe(`no sandbox ${b}`);
    }
    // On A: no delete, fork, info, pause; nothing tenant-wide.
    for (const [method, url, scope] of [
      ['DELETE', `/sandboxes/${a}`, 'sandboxes:write'],
      ['POST', `/sandboxes/${a}/fork`, 'sandboxes:write'],
      ['POST', `/sandboxes/${a}/pause`, 'sandboxes:write'],
      ['GET', `/sandboxes/${a}`, 'sandboxes:read'],
      ['POST', `/sandboxes/${a}/snapshots`, 'snapshots'],
      ['GET', '/sandboxes', 'sandboxes:read'],
      ['POST', '/sandboxes', 'sandboxes:write'],
      ['GET', '/templates', 'templates:read'],
      ['POST', '/keys', 'keys'],
    ] as const) {
      const res = await call(method, url, agent, method === 'POST' ? {} : undefined);
      expectError(res, 403, 'forbidden');
      expect(res.json().error.details?.requiredScope, `${method} ${url}`).toBe(scope);
    }
    // The key's use is listed (to the second).
    const listed = (await call('GET', '/keys', h.admin)).json().items.find((k: { id: string }) => k.id === key.id);
    expect(listed.lastUsedAt).toBe(new Date(Math.floor(nowMs / 1000) * 1000).toISOString());
    expect((await call('GET', `/sandboxes/${b}`, h.admin)).statusCode, 'B is untouched by the refused calls').toBe(200);

    // Past its expiry the key does nothing, the auth cache notwithstanding.
    nowMs += 3_600_000;
    expectError(await call('POST', `/sandboxes/${a}/exec`, agent, { cmd: 'true' }), 401, 'key_expired');
  });

  test('a key holding sandboxes:write but restricted still cannot create or fork; it may delete its sandbox', async () => {
    const a = await createSandbox();
    const { secret } = await newKey({
      name: 'owner',
      scopes: ['sandboxes:read', 'sandboxes:write'],
      restriction: { type: 'sandbox', sandboxId: a },
    });
    expectError(await call('POST', '/sandboxes', bearer(secret), {}), 403, 'forbidden');
    const fork = await call('POST', `/sandboxes/${a}/fork`, bearer(secret), {});
    expectError(fork, 403, 'forbidden');
    expect(fork.json().error.message).toMatch(/cannot create sandboxes/);
    expect((await call('GET', `/sandboxes/${a}`, bearer(secret))).statusCode).toBe(200);
    expect((await call('DELETE', `/sandboxes/${a}`, bearer(secret))).statusCode).toBe(204);
  });

  test('deleting the sandbox revokes its keys; a revoke takes effect at once', async () => {
    const a = await createSandbox();
    const { key, secret } = await newKey({
      name: 'dies-with-a',
      scopes: ['commands'],
      restriction: { type: 'sandbox', sandboxId: a },
    });
    expect((await call('POST', `/sandboxes/${a}/exec`, bearer(secret), { cmd: 'true' })).statusCode).toBe(200);
    expect((await call('DELETE', `/sandboxes/${a}`, h.admin)).statusCode).toBe(204);
    const listed = (await call('GET', '/keys', h.admin)).json().items.find((k: { id: string }) => k.id === key.id);
    expect(listed.revokedAt).not.toBeNull();
    nowMs += 1001; // past the authentication reuse bound
    expectError(await call('POST', `/sandboxes/${a}/exec`, bearer(secret), { cmd: 'true' }), 401, 'unauthorized');

    const b = await createSandbox();
    const other = await newKey({
      name: 'revoked',
      scopes: ['commands'],
      restriction: { type: 'sandbox', sandboxId: b },
    });
    expect((await call('POST', `/sandboxes/${b}/exec`, bearer(other.secret), { cmd: 'true' })).statusCode).toBe(200);
    expect((await call('DELETE', `/keys/${other.key.id}`, h.admin)).statusCode).toBe(204);
    expectError(await call('POST', `/sandboxes/${b}/exec`, bearer(other.secret), { cmd: 'true' }), 401, 'unauthorized');
  });
});

describe('a key restricted by labels', () => {
  test('reaches the sandboxes carrying every label, 404 for others', async () => {
    const mine = await createSandbox({ team: 'x', env: 'dev' });
    const theirs = await createSandbox({ team: 'y' });
    const { secret } = await newKey({
      name: 'team-x',
      scopes: ['sandboxes:read', 'commands'],
      restriction: { type: 'labels', labels: { team: 'x' } },
    });
    expect((await call('GET', `/sandboxes/${mine}`, bearer(secret))).statusCode).toBe(200);
    expect((await call('POST', `/sandboxes/${mine}/exec`, bearer(secret), { cmd: 'true' })).statusCode).toBe(200);
    expectError(await call('GET', `/sandboxes/${theirs}`, bearer(secret)), 404, 'sandbox_not_found');
    expectError(await call('GET', '/sandboxes', bearer(secret)), 403, 'forbidden');
  });
});

describe('roles', () => {
  test('a viewer reads everything of its tenant and changes nothing', async () => {
    const a = await createSandbox();
    expect((await writeFile(a, h.admin)).statusCode).toBe(200);
    const { secret } = await newKey({ name: 'auditor', role: 'viewer' });
    const viewer = bearer(secret);
    for (const url of ['/sandboxes', `/sandboxes/${a}`, '/templates', '/events', '/quota', '/snapshots']) {
      expect((await call('GET', url, viewer)).statusCode, url).toBe(200);
    }
    const read = await call('GET', `/sandboxes/${a}/files/content?path=${encodeURIComponent('/root/a.txt')}`, viewer);
    expect(read.body).toBe('hello');
    for (const [method, url] of [
      ['POST', `/sandboxes/${a}/exec`],
      ['DELETE', `/sandboxes/${a}`],
      ['POST', '/sandboxes'],
      ['POST', '/keys'],
      ['PATCH', `/sandboxes/${a}`],
    ] as const) {
      const res = await call(method, url, viewer, method === 'DELETE' ? undefined : { name: 'x' });
      expectError(res, 403, 'forbidden');
    }
    expectError(await writeFile(a, viewer), 403, 'forbidden');
    expect((await call('GET', `/sandboxes/${a}`, h.admin)).json().state).toBe('running');
  });

  test('a member hands on keys with no more than it holds; an admin key without the admin scope is a member', async () => {
    const member = await newKey({ name: 'owner', role: 'member', scopes: ['sandboxes:read', 'commands', 'keys'] });
    const asMember = bearer(member.secret);
    const viewer = await newKey({ name: 'v', role: 'viewer', scopes: ['sandboxes:read'] }, asMember);
    expect(viewer.key).toMatchObject({ role: 'viewer', tenantId: 'default' });
    expectError(await call('POST', '/keys', asMember, { name: 'up', role: 'admin' }), 403, 'forbidden');
    expectError(await call('POST', '/keys', asMember, { name: 'f', scopes: ['files'] }), 403, 'forbidden');
    expectError(await call('POST', '/keys', asMember, { name: 'all' }), 403, 'forbidden');
    expectError(
      await call('POST', '/keys', asMember, { name: 'elsewhere', tenantId: 'other', scopes: ['commands'] }),
      403,
      'forbidden',
    );
    expectError(
      await call('POST', '/keys', h.admin, { name: 'm', role: 'member', scopes: ['admin'] }),
      400,
      'invalid_request',
    );

    const limitedAdmin = await newKey({ name: 'la', role: 'admin', scopes: ['sandboxes:read', 'keys'] });
    expectError(await call('PUT', '/tenants/default/quota', bearer(limitedAdmin.secret), {}), 403, 'forbidden');
    expectError(
      await call('GET', '/sandboxes', { ...bearer(limitedAdmin.secret), 'x-burrow-tenant': 'other' }),
      403,
      'forbidden',
    );

    // A key that expires cannot mint one that outlives it.
    const shortLived = await newKey({ name: 'short', scopes: ['commands', 'keys'], ttlMs: 60_000 });
    expectError(
      await call('POST', '/keys', bearer(shortLived.secret), { name: 'long', scopes: ['commands'] }),
      403,
      'forbidden',
    );
    expect(
      (await call('POST', '/keys', bearer(shortLived.secret), { name: 'ok', scopes: ['commands'], ttlMs: 30_000 }))
        .statusCode,
    ).toBe(201);
  });

  test('scoped, restricted and viewer keys are refused by the E2B API', () => {
    expect(hasFullRights({ role: 'member' })).toBe(true);
    expect(hasFullRights({ role: 'viewer' })).toBe(false);
    expect(hasFullRights({ role: 'member', scopes: ['commands'] })).toBe(false);
    expect(hasFullRights({ role: 'member', restriction: { type: 'labels', labels: { a: 'b' } } })).toBe(false);
  });
});

describe('bad input', () => {
  test('unknown scopes, another tenant sandbox, a past expiry, ttl with expiresAt', async () => {
    expectError(
      await call('POST', '/keys', h.admin, { name: 'x', scopes: ['sandboxes:rule'] }),
      400,
      'invalid_request',
    );
    expectError(await call('POST', '/keys', h.admin, { name: 'x', scopes: [] }), 400, 'invalid_request');
    expectError(
      await call('POST', '/keys', h.admin, { name: 'x', scopes: ['files', 'files'] }),
      400,
      'invalid_request',
    );
    const a = await createSandbox();
    const res = await call('POST', '/keys', h.admin, {
      name: 'x',
      tenantId: 'other',
      restriction: { type: 'sandbox', sandboxId: a },
    });
    expectError(res, 404, 'sandbox_not_found');
    expect(res.json().error.message).toBe(`tenant other has no sandbox ${a}`);
    expectError(
      await call('POST', '/keys', h.admin, { name: 'x', expiresAt: new Date(nowMs - 1000).toISOString() }),
      400,
      'invalid_request',
    );
    expectError(
      await call('POST', '/keys', h.admin, {
        name: 'x',
        ttlMs: 60_000,
        expiresAt: new Date(nowMs + 60_000).toISOString(),
      }),
      400,
      'invalid_request',
    );
    expectError(
      await call('POST', '/keys', h.admin, { name: 'x', restriction: { type: 'labels', labels: {} } }),
      400,
      'invalid_request',
    );
  });
});
