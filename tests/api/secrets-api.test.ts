import { randomBytes } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Harness, startHarness } from './api-harness.js';

// Real SQLite through the API with the FAKE driver (no network: creates with secrets are refused as unsupported).
let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => {
  await h?.close();
});

const call = (method: 'GET' | 'PUT' | 'POST' | 'DELETE', url: string, payload?: object) =>
  h.burrow.app.inject({ method, url, headers: h.admin, ...(payload === undefined ? {} : { payload }) });
const codeOf = (body: string) => (JSON.parse(body) as { error: { code: string } }).error.code;

describe('/v1/secrets', () => {
  it('sets, lists, rotates and deletes; never returns the value, and stores it only sealed', async () => {
    const value = `sk-${randomBytes(16).toString('hex')}`;
    const set = await call('PUT', '/v1/secrets/OPENAI', {
      value,
      hosts: ['API.openai.com.', '*.example.com'],
      header: 'Authorization',
      format: 'Bearer {value}',
    });
    expect(set.statusCode, set.body).toBe(200);
    expect(set.json()).toMatchObject({
      name: 'OPENAI',
      hosts: ['api.openai.com', '*.example.com'],
      header: 'Authorization',
      format: 'Bearer {value}',
      rotatedAt: null,
    });
    const rotatedValue = `sk-${randomBytes(16).toString('hex')}`;
    const rotated = await call('POST', '/v1/secrets/OPENAI/rotate', { value: rotatedValue });
    expect(rotated.statusCode).toBe(200);
    expect((rotated.json() as { rotatedAt: string | null }).rotatedAt).not.toBeNull();
    const list = await call('GET', '/v1/secrets');
    expect((list.json() as { items: Array<{ name: string }> }).items.map((s) => s.name)).toEqual(['OPENAI']);
    for (const body of [set.body, rotated.body, list.body]) {
      expect(body).not.toContain(value);
      expect(body).not.toContain(rotatedValue);
    }
    for (const suffix of ['', '-wal']) {
      const bytes = await readFile(join(h.dataDir, `burrow.db${suffix}`)).catch(() => Buffer.alloc(0));
      expect(bytes.includes(value)).toBe(false);
      expect(bytes.includes(rotatedValue)).toBe(false);
    }
    expect((await stat(join(h.dataDir, 'secret-key'))).mode & 0o777).toBe(0o600);
    expect((await call('DELETE', '/v1/secrets/OPENAI')).statusCode).toBe(204);
    const gone = await call('DELETE', '/v1/secrets/OPENAI');
    expect([gone.statusCode, codeOf(gone.body)]).toEqual([404, 'secret_not_found']);
  });

  it('answers bad input with stable codes', async () => {
    const big = await call('PUT', '/v1/secrets/BIG', { value: 'é'.repeat(40_000), hosts: ['a.test'] });
    expect([big.statusCode, codeOf(big.body)]).toEqual([413, 'secret_too_large']);
    const cases: object[] = [
      { value: 'x', hosts: [] },
      { value: 'x', hosts: ['10.0.0.0/8'] },
      { value: 'a\r\nX-Evil: 1', hosts: ['a.test'] },
      { value: 'x', hosts: ['a.test'], format: 'Bearer {value}' },
      { value: 'x', hosts: ['a.test'], header: 'Host' },
      { value: 'x', hosts: ['a.test'], header: 'X-Key', format: 'no placeholder' },
    ];
    for (const body of cases) {
      const answer = await call('PUT', '/v1/secrets/BAD', body);
      expect([answer.statusCode, codeOf(answer.body)], JSON.stringify(body)).toEqual([400, 'invalid_request']);
    }
    const name = await call('PUT', '/v1/secrets/9bad', { value: 'x', hosts: ['a.test'] });
    expect(name.statusCode).toBe(400);
    const rotate = await call('POST', '/v1/secrets/NOPE/rotate', { value: 'x' });
    expect([rotate.statusCode, codeOf(rotate.body)]).toEqual([404, 'secret_not_found']);
    const create = await call('POST', '/v1/sandboxes', { secrets: ['A', { name: 'B', env: 'A' }] });
    expect([create.statusCode, codeOf(create.body)]).toEqual([400, 'invalid_request']);
  });
});
