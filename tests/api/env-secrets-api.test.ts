import { randomBytes } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { type Harness, startHarness } from './api-harness.js';

// Real SQLite (WAL mode) through the API with the FAKE driver: the database's own files are grepped.
let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => {
  await h?.close();
});

/** Copies of `needle` in the raw bytes of burrow.db, its -wal and its -shm. */
async function copiesInDatabase(needle: string): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const suffix of ['', '-wal', '-shm']) {
    const bytes = await readFile(join(h.dataDir, `burrow.db${suffix}`)).catch(() => Buffer.alloc(0));
    let n = 0;
    for (let at = bytes.indexOf(needle); at !== -1; at = bytes.indexOf(needle, at + 1)) n++;
    counts[`burrow.db${suffix}`] = n;
  }
  return counts;
}

test('a sandbox env value leaves no copy in burrow.db, -wal or -shm, and its key is destroyed on delete', async () => {
  const secret = `secret-${randomBytes(12).toString('hex')}`;
  const rotated = `rotated-${randomBytes(12).toString('hex')}`;
  const call = (method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, payload?: object) =>
    h.burrow.app.inject({ method, url, headers: h.admin, ...(payload === undefined ? {} : { payload }) });
  const created = await call('POST', '/v1/sandboxes', { env: { API_TOKEN: secret } });
  expect(created.statusCode, created.body).toBe(201);
  const id = (created.json() as { id: string }).id;
  // Row rewrites put page copies into the WAL: pause/resume, a snapshot (its settings carry env), a fork, a PATCH.
  for (const verb of ['pause', 'resume'])
    expect((await call('POST', `/v1/sandboxes/${id}/${verb}`)).statusCode).toBe(200);
  expect((await call('POST', `/v1/sandboxes/${id}/snapshots`, {})).statusCode).toBe(201);
  const forked = await call('POST', `/v1/sandboxes/${id}/fork`, { count: 1 });
  expect(forked.statusCode, forked.body).toBe(201);
  const childId = (forked.json() as { items: Array<{ id: string }> }).items[0]?.id ?? '';
  expect((await call('PATCH', `/v1/sandboxes/${id}`, { env: { API_TOKEN: rotated } })).statusCode).toBe(200);
  const info = await call('GET', `/v1/sandboxes/${id}`);
  expect((info.json() as { env: Record<string, string> }).env).toEqual({ API_TOKEN: rotated });

  for (const sandbox of [id, childId]) expect((await call('DELETE', `/v1/sandboxes/${sandbox}`)).statusCode).toBe(204);
  await h.burrow.reconciler.reconcileOnce();
  const zero = { 'burrow.db': 0, 'burrow.db-wal': 0, 'burrow.db-shm': 0 };
  expect(await copiesInDatabase(secret)).toEqual(zero);
  expect(await copiesInDatabase(rotated)).toEqual(zero);
  // The ciphertext that is left (free pages, WAL frames) has no key any more.
  const keys = await readdir(join(h.dataDir, 'env-keys'));
  expect(keys.filter((k) => k.startsWith(id) || k.startsWith(childId))).toEqual([]);
});
