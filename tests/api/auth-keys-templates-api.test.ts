import { ErrorEnvelopeSchema, TemplateBuildEventSchema } from '@burrow/contract';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Harness, startHarness } from './api-harness.js';

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => {
  await h?.close();
});

function expectError(res: LightMyRequestResponse, status: number, code: string) {
  expect(res.statusCode, res.body).toBe(status);
  expect(ErrorEnvelopeSchema.parse(res.json()).error.code).toBe(code);
}
const bearer = (secret: string) => ({ authorization: `Bearer ${secret}` });

async function newKey(body: Record<string, unknown>) {
  const res = await h.burrow.app.inject({ method: 'POST', url: '/v1/keys', headers: h.admin, payload: body });
  expect(res.statusCode, res.body).toBe(201);
  return res.json() as { key: { id: string; tenantId: string; prefix: string }; secret: string };
}

describe('auth', () => {
  test('missing, malformed, wrong and revoked keys get 401; public routes need none', async () => {
    expectError(await h.burrow.app.inject({ method: 'GET', url: '/v1/sandboxes' }), 401, 'unauthorized');
    const basic = await h.burrow.app.inject({
      method: 'GET',
      url: '/v1/sandboxes',
      headers: { authorization: 'Basic YnVycm93OmJrX3g=' },
    });
    expectError(basic, 401, 'unauthorized');
    // Says what came and what to send instead: curl -u sends Basic.
    expect(basic.json().error.message).toMatch(/bearer tokens, not `Basic`/);
    expect(basic.json().error.hint).toMatch(/Authorization: Bearer bk_.*instead of -u/);
    const emptyBearer = await h.burrow.app.inject({
      method: 'GET',
      url: '/v1/sandboxes',
      headers: { authorization: 'Bearer ' },
    });
    expectError(emptyBearer, 401, 'unauthorized');
    expect(emptyBearer.json().error.message).toMatch(/no key after `Bearer`/);
    expectError(
      await h.burrow.app.inject({ method: 'GET', url: '/v1/sandboxes', headers: bearer('bk_wrong') }),
      401,
      'unauthorized',
    );
    const member = await newKey({ name: 'to-revoke' });
    expect(member.secret).toMatch(/^bk_[0-9a-z]{32}$/);
    expect(member.secret.startsWith(member.key.prefix)).toBe(true);
    expect(
      (await h.burrow.app.inject({ method: 'GET', url: '/v1/sandboxes', headers: bearer(member.secret) })).statusCode,
    ).toBe(200);
    expect(
      (await h.burrow.app.inject({ method: 'DELETE', url: `/v1/keys/${member.key.id}`, headers: h.admin })).statusCode,
    ).toBe(204);
    expectError(
      await h.burrow.app.inject({ method: 'GET', url: '/v1/sandboxes', headers: bearer(member.secret) }),
      401,
      'unauthorized',
    );
    expect((await h.burrow.app.inject({ method: 'GET', url: '/v1/health' })).statusCode).toBe(200);
    const doc = await h.burrow.app.inject({ method: 'GET', url: '/v1/openapi.json' });
    expect(doc.json().openapi).toBe('3.1.0');
  });

  test('secrets are stored only as sha256', async () => {
    const rows = await h.burrow.store.db.selectFrom('api_keys').selectAll().execute();
    for (const row of rows) {
      expect(row.secret_hash).toMatch(/^[0-9a-f]{64}$/);
      expect(JSON.stringify(row)).not.toContain(h.adminSecret);
    }
  });

  test("another tenant's sandbox answers exactly like an unknown id", async () => {
    const other = await newKey({ name: 'tenant-b', tenantId: 'tenant-b' });
    const mine = (
      await h.burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: h.admin, payload: {} })
    ).json();
    const unknown = 'sbx_00000000000000000000';
    for (const [method, suffix, payload] of [
      ['GET', '', undefined],
      ['DELETE', '', undefined],
      ['POST', '/exec', { cmd: 'true' }],
    ] as const) {
      const theirs = await h.burrow.app.inject({
        method,
        url: `/v1/sandboxes/${mine.id}${suffix}`,
        headers: bearer(other.secret),
        ...(payload ? { payload } : {}),
      });
      const none = await h.burrow.app.inject({
        method,
        url: `/v1/sandboxes/${unknown}${suffix}`,
        headers: bearer(other.secret),
        ...(payload ? { payload } : {}),
      });
      expect(theirs.statusCode).toBe(404);
      expect(none.statusCode).toBe(404);
      const a = theirs.json().error;
      const b = none.json().error;
      expect(a.code).toBe('sandbox_not_found');
      expect(a.message.replace(mine.id, 'ID')).toBe(b.message.replace(unknown, 'ID'));
      expect(a.hint).toBe(b.hint);
    }
    const list = (
      await h.burrow.app.inject({ method: 'GET', url: '/v1/sandboxes', headers: bearer(other.secret) })
    ).json();
    expect(list.items).toEqual([]);
    expect(
      (await h.burrow.app.inject({ method: 'GET', url: `/v1/sandboxes/${mine.id}`, headers: h.admin })).statusCode,
    ).toBe(200);
    await h.burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${mine.id}`, headers: h.admin });
  });

  test('an admin key acts for another tenant with X-Burrow-Tenant; a member key only for its own', async () => {
    const member = await newKey({ name: 'tenant-c', tenantId: 'tenant-c' });
    const asC = { ...h.admin, 'x-burrow-tenant': 'tenant-c' };
    // The admin creates in tenant-c: the member of tenant-c sees it, the admin's own tenant does not.
    const created = await h.burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: asC, payload: {} });
    expect(created.statusCode, created.body).toBe(201);
    const id = created.json().id as string;
    const ids = async (headers: Record<string, string>) =>
      (await h.burrow.app.inject({ method: 'GET', url: '/v1/sandboxes', headers }))
        .json()
        .items.map((s: { id: string }) => s.id);
    expect(await ids(bearer(member.secret))).toContain(id);
    expect(await ids(h.admin)).not.toContain(id);
    expect(await ids(asC)).toContain(id);
    // A member naming its own tenant is fine; another tenant is forbidden, and nothing is listed.
    expect(await ids({ ...bearer(member.secret), 'x-burrow-tenant': 'tenant-c' })).toContain(id);
    const denied = await h.burrow.app.inject({
      method: 'GET',
      url: '/v1/sandboxes',
      headers: { ...bearer(member.secret), 'x-burrow-tenant': 'default' },
    });
    expectError(denied, 403, 'forbidden');
    expect(denied.json().error.message).toContain('needs an admin key');
    expect(denied.json().error.requestId).toBe(denied.headers['x-request-id']);
    for (const bad of ['Bad!', '', 'a'.repeat(64)]) {
      expectError(
        await h.burrow.app.inject({
          method: 'GET',
          url: '/v1/sandboxes',
          headers: { ...h.admin, 'x-burrow-tenant': bad },
        }),
        400,
        'invalid_request',
      );
    }
    // The member cannot delete another tenant's sandbox by naming it; the admin acting for tenant-c can.
    const mine = (
      await h.burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: h.admin, payload: {} })
    ).json();
    expectError(
      await h.burrow.app.inject({
        method: 'DELETE',
        url: `/v1/sandboxes/${mine.id}`,
        headers: { ...bearer(member.secret), 'x-burrow-tenant': 'default' },
      }),
      403,
      'forbidden',
    );
    const removed = await h.burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${id}`, headers: asC });
    expect(removed.statusCode, removed.body).toBeLessThan(300);
    expect(await ids(bearer(member.secret))).not.toContain(id);
    await h.burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${mine.id}`, headers: h.admin });
  });
});

describe('keys', () => {
  test('members manage only member and viewer keys of their own tenant and see only their tenant', async () => {
    const member = await newKey({ name: 'member-a', tenantId: 'tenant-a' });
    const other = await newKey({ name: 'member-b', tenantId: 'tenant-b' });
    for (const payload of [
      { name: 'x', role: 'admin' },
      { name: 'x', tenantId: 'tenant-b' },
    ]) {
      expectError(
        await h.burrow.app.inject({ method: 'POST', url: '/v1/keys', headers: bearer(member.secret), payload }),
        403,
        'forbidden',
      );
    }
    expectError(
      await h.burrow.app.inject({ method: 'DELETE', url: `/v1/keys/${other.key.id}`, headers: bearer(member.secret) }),
      404,
      'key_not_found',
    );
    const admin = (await h.burrow.app.inject({ method: 'GET', url: '/v1/keys', headers: h.admin })).json().items[0];
    expectError(
      await h.burrow.app.inject({ method: 'DELETE', url: `/v1/keys/${admin.id}`, headers: bearer(member.secret) }),
      404,
      'key_not_found',
    );
    const listed = (
      await h.burrow.app.inject({ method: 'GET', url: '/v1/keys', headers: bearer(member.secret) })
    ).json();
    expect(listed.items.every((k: { tenantId: string }) => k.tenantId === 'tenant-a')).toBe(true);
    expect(JSON.stringify(listed)).not.toContain('secret');
    const all = (await h.burrow.app.inject({ method: 'GET', url: '/v1/keys', headers: h.admin })).json();
    expect(all.items.length).toBeGreaterThan(listed.items.length);
  });

  test('bad key requests', async () => {
    expectError(
      await h.burrow.app.inject({ method: 'POST', url: '/v1/keys', headers: h.admin, payload: { name: '' } }),
      400,
      'invalid_request',
    );
    expectError(
      await h.burrow.app.inject({
        method: 'POST',
        url: '/v1/keys',
        headers: h.admin,
        payload: { name: 'x', role: 'root' },
      }),
      400,
      'invalid_request',
    );
    expectError(
      await h.burrow.app.inject({
        method: 'POST',
        url: '/v1/keys',
        headers: h.admin,
        payload: { name: 'x', tenantId: 'Bad!' },
      }),
      400,
      'invalid_request',
    );
    expectError(
      await h.burrow.app.inject({ method: 'DELETE', url: '/v1/keys/key_00000000000000000000', headers: h.admin }),
      404,
      'key_not_found',
    );
    expectError(
      await h.burrow.app.inject({ method: 'DELETE', url: '/v1/keys/nope', headers: h.admin }),
      400,
      'invalid_request',
    );
  });
});

describe('templates', () => {
  test('list, build (JSON and SSE), use, refuse deleting base or in-use, delete', async () => {
    const list = (await h.burrow.app.inject({ method: 'GET', url: '/v1/templates', headers: h.admin })).json();
    expect(list.items.map((t: { name: string }) => t.name)).toContain('base');
    const built = await h.burrow.app.inject({
      method: 'POST',
      url: '/v1/templates',
      headers: h.admin,
      payload: { name: 'py', apt: ['python3'], run: ['echo hi'] },
    });
    expect(built.statusCode, built.body).toBe(201);
    expect(built.json()).toMatchObject({ name: 'py', state: 'ready', from: 'base', apt: ['python3'] });
    expectError(
      await h.burrow.app.inject({ method: 'POST', url: '/v1/templates', headers: h.admin, payload: { name: 'py' } }),
      409,
      'template_exists',
    );
    expectError(
      await h.burrow.app.inject({
        method: 'POST',
        url: '/v1/templates',
        headers: h.admin,
        payload: { name: 'x', from: 'missing' },
      }),
      404,
      'template_not_found',
    );
    expectError(
      await h.burrow.app.inject({
        method: 'POST',
        url: '/v1/templates',
        headers: h.admin,
        payload: { name: 'x', apt: ['Not A Package'] },
      }),
      400,
      'invalid_request',
    );

    const sse = await h.burrow.app.inject({
      method: 'POST',
      url: '/v1/templates',
      headers: { ...h.admin, accept: 'text/event-stream' },
      payload: { name: 'streamed', from: 'py', run: ['true'] },
    });
    expect(sse.headers['content-type']).toContain('text/event-stream');
    const events = sse.body
      .split('\n\n')
      .filter((b) => b.startsWith('data: '))
      .map((b) => TemplateBuildEventSchema.parse(JSON.parse(b.slice(6))));
    expect(events[0]?.type).toBe('log');
    expect(events.at(-1)).toMatchObject({ type: 'done', template: { name: 'streamed', state: 'ready' } });

    const failed = await h.burrow.app.inject({
      method: 'POST',
      url: '/v1/templates',
      headers: h.admin,
      payload: { name: 'broken', run: ['fail'] },
    });
    expectError(failed, 422, 'template_build_failed');
    expect(
      (await h.burrow.app.inject({ method: 'GET', url: '/v1/templates/broken', headers: h.admin })).json().state,
    ).toBe('error');
    expectError(
      await h.burrow.app.inject({
        method: 'POST',
        url: '/v1/sandboxes',
        headers: h.admin,
        payload: { template: 'broken' },
      }),
      404,
      'template_not_found',
    );

    const sbx = (
      await h.burrow.app.inject({
        method: 'POST',
        url: '/v1/sandboxes',
        headers: h.admin,
        payload: { template: 'streamed' },
      })
    ).json();
    expect(sbx.template).toBe('streamed');
    expectError(
      await h.burrow.app.inject({ method: 'DELETE', url: '/v1/templates/streamed', headers: h.admin }),
      409,
      'conflict',
    );
    expectError(
      await h.burrow.app.inject({ method: 'DELETE', url: '/v1/templates/base', headers: h.admin }),
      409,
      'conflict',
    );
    expectError(
      await h.burrow.app.inject({ method: 'DELETE', url: '/v1/templates/py', headers: h.admin }),
      409,
      'conflict',
    );
    await h.burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${sbx.id}`, headers: h.admin });
    expect(
      (await h.burrow.app.inject({ method: 'DELETE', url: '/v1/templates/streamed', headers: h.admin })).statusCode,
    ).toBe(204);
    expectError(
      await h.burrow.app.inject({ method: 'GET', url: '/v1/templates/streamed', headers: h.admin }),
      404,
      'template_not_found',
    );
  });

  test('members list templates but cannot build or delete', async () => {
    const member = await newKey({ name: 'tmpl-member' });
    expect(
      (await h.burrow.app.inject({ method: 'GET', url: '/v1/templates', headers: bearer(member.secret) })).statusCode,
    ).toBe(200);
    expectError(
      await h.burrow.app.inject({
        method: 'POST',
        url: '/v1/templates',
        headers: bearer(member.secret),
        payload: { name: 'm' },
      }),
      403,
      'forbidden',
    );
    expectError(
      await h.burrow.app.inject({ method: 'DELETE', url: '/v1/templates/py', headers: bearer(member.secret) }),
      403,
      'forbidden',
    );
  });
});
