import { AuditListSchema, AuditVerifySchema, ErrorEnvelopeSchema, SandboxSchema } from '@burrow/contract';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { buildApp } from '../../packages/server/src/http/app.js';
import { type Harness, startHarness } from './api-harness.js';

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => {
  await h?.close();
});

const bearer = (secret: string) => ({ authorization: `Bearer ${secret}` });
async function call(method: string, url: string, headers: Record<string, string>, payload?: unknown) {
  return h.burrow.app.inject({
    method: method as 'GET',
    url: `/v1${url}`,
    headers,
    ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }),
  });
}
async function audit(query: string, headers = h.admin) {
  await h.burrow.services.audit?.flush();
  const res = await call('GET', `/audit${query}`, headers);
  expect(res.statusCode, res.body).toBe(200);
  return AuditListSchema.parse(res.json());
}

describe('audit log', () => {
  test('records changes and refusals with who, what, on what and how; never secrets, contents or commands', async () => {
    const created = await call('POST', '/sandboxes', h.admin, {});
    const a = SandboxSchema.parse(created.json()).id;
    const b = SandboxSchema.parse((await call('POST', '/sandboxes', h.admin, {})).json()).id;
    const keyRes = await call('POST', '/keys', h.admin, {
      name: 'agent-7',
      scopes: ['commands', 'files'],
      restriction: { type: 'sandbox', sandboxId: a },
    });
    const agent = keyRes.json() as { key: { id: string }; secret: string };
    const exec = await call('POST', `/sandboxes/${a}/exec`, bearer(agent.secret), { cmd: 'echo TOPSECRET' });
    expect(exec.statusCode).toBe(200);
    const put = await h.burrow.app.inject({
      method: 'PUT',
      url: `/v1/sandboxes/${a}/files/content?path=${encodeURIComponent('/root/f')}`,
      headers: { ...bearer(agent.secret), 'content-type': 'application/octet-stream' },
      payload: Buffer.from('FILECONTENTS'),
    });
    expect(put.statusCode).toBe(200);
    const outside = await call('GET', `/sandboxes/${b}`, bearer(agent.secret));
    expect(outside.statusCode).toBe(404);
    const del = await call('DELETE', `/sandboxes/${a}`, bearer(agent.secret));
    expect(del.statusCode).toBe(403);
    expect((await call('GET', '/sandboxes', bearer('bk_wrong'))).statusCode).toBe(401);
    // Reads by a key that may make them are not recorded.
    expect((await call('GET', '/sandboxes', h.admin)).statusCode).toBe(200);

    const { items } = await audit('');
    const rows = items.map((r) => [r.action, r.target, r.result, r.status, r.errorCode, r.keyId]);
    expect(rows).toEqual([
      ['POST /v1/sandboxes', null, 'ok', 201, null, expect.stringMatching(/^key_/)],
      ['POST /v1/sandboxes', null, 'ok', 201, null, expect.stringMatching(/^key_/)],
      ['POST /v1/keys', null, 'ok', 201, null, expect.stringMatching(/^key_/)],
      ['POST /v1/sandboxes/:id/exec', a, 'ok', 200, null, agent.key.id],
      ['PUT /v1/sandboxes/:id/files/content', a, 'ok', 200, null, agent.key.id],
      ['GET /v1/sandboxes/:id', b, 'refused', 404, 'sandbox_not_found', agent.key.id],
      ['DELETE /v1/sandboxes/:id', a, 'refused', 403, 'forbidden', agent.key.id],
      ['GET /v1/sandboxes', null, 'refused', 401, 'unauthorized', null],
    ]);
    const exec7 = items[3];
    expect(exec7).toMatchObject({ tenantId: 'default', keyName: 'agent-7', sourceAddress: '127.0.0.1', details: null });
    expect(exec7?.requestId).toBe(exec.headers['x-request-id']);
    const text = JSON.stringify(items);
    for (const secret of ['TOPSECRET', 'FILECONTENTS', agent.secret]) expect(text).not.toContain(secret);

    // Filters and the cursor.
    const refused = await audit('?result=refused');
    expect(refused.items.map((r) => r.status)).toEqual([404, 403, 401]);
    const byKey = await audit(`?keyId=${agent.key.id}&limit=2`);
    expect(byKey.items.map((r) => r.action)).toEqual([
      'POST /v1/sandboxes/:id/exec',
      'PUT /v1/sandboxes/:id/files/content',
    ]);
    const next = await audit(`?keyId=${agent.key.id}&limit=2&cursor=${byKey.nextCursor}`);
    expect(next.items.map((r) => r.status)).toEqual([404, 403]);
    expect((await audit(`?target=${b}`)).items).toHaveLength(1);
    expect((await audit('?action=DELETE')).items).toHaveLength(1);

    const verify = await call('GET', '/audit/verify', h.admin);
    expect(AuditVerifySchema.parse(verify.json())).toMatchObject({ ok: true, problems: [] });
  });

  test('bad queries, and who may read what', async () => {
    const bad = await call('GET', '/audit?from=2026-12-02T00:00:00.000Z&to=2026-12-01T00:00:00.000Z', h.admin);
    expect(bad.statusCode).toBe(400);
    expect(ErrorEnvelopeSchema.parse(bad.json()).error).toMatchObject({ code: 'invalid_request' });
    expect(bad.json().error.message).toMatch(/`from` is after `to`/);
    expect((await call('GET', '/audit?cursor=abc', h.admin)).statusCode).toBe(400);

    const other = (await call('POST', '/keys', h.admin, { name: 'o', tenantId: 'other' })).json() as { secret: string };
    await call('POST', '/sandboxes', bearer(other.secret), { labels: { k: 'v' } });
    const own = await audit('', bearer(other.secret));
    expect(own.items.length).toBeGreaterThan(0);
    expect(own.items.every((r) => r.tenantId === 'other')).toBe(true);
    expect((await call('GET', '/audit?tenant=default', bearer(other.secret))).statusCode).toBe(403);
    expect((await call('GET', '/audit/verify', bearer(other.secret))).statusCode).toBe(403);
    const viewer = (await call('POST', '/keys', h.admin, { name: 'v', role: 'viewer', tenantId: 'other' })).json() as {
      secret: string;
    };
    expect((await audit('', bearer(viewer.secret))).items.length).toBe(own.items.length + 2); // the two refusals since
  });

  test('command lines only when the operator opts in', async () => {
    const app = await buildApp({
      services: h.burrow.services,
      logger: pino({ level: 'silent' }),
      auditCommandLines: true,
    });
    try {
      const id = SandboxSchema.parse((await call('POST', '/sandboxes', h.admin, {})).json()).id;
      const exec = await app.inject({
        method: 'POST',
        url: `/v1/sandboxes/${id}/exec`,
        headers: h.admin,
        payload: { cmd: 'echo hi' },
      });
      expect(exec.statusCode).toBe(200);
      const { items } = await audit(`?target=${id}&action=POST /v1/sandboxes/:id/exec`);
      expect(items.map((r) => r.details)).toEqual([{ cmd: 'echo hi' }]);
    } finally {
      await app.close();
    }
  });
});
