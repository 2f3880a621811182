/**
 * Volumes through the API on the shared harness (FAKE driver, real SQLite, real loop-mounted volumes): contract
 * refusals, volume snapshot retention on a moved clock, and the quota view. No sandbox runs here.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Harness, startHarness } from './api-harness.js';

describe('volumes API (fake driver, real volume storage)', () => {
  let h: Harness;
  let nowMs = Date.parse('2026-12-02T08:00:00.000Z');
  const call = async (method: 'GET' | 'POST' | 'DELETE', url: string, payload?: object) => {
    const res = await h.burrow.app.inject({
      method,
      url: `/v1${url}`,
      headers: h.admin,
      ...(payload ? { payload } : {}),
    });
    return { status: res.statusCode, body: res.body === '' ? null : res.json() };
  };
  beforeAll(async () => {
    h = await startHarness({ clock: { nowMs: () => nowMs } });
  });
  afterAll(async () => {
    for (const v of (await call('GET', '/volumes?limit=200')).body.items)
      await call('DELETE', `/volumes/${v.id}?force=true`);
    await h?.close();
  });

  test('bad requests are refused by the contract with stable codes', async () => {
    const cases: Array<[object, string]> = [
      [{ name: 'Bad_Name', sizeMiB: 16 }, 'invalid_request'],
      [{ name: 'ok', sizeMiB: 8 }, 'invalid_request'],
      [{ name: 'ok', sizeMiB: 16, extra: 1 }, 'invalid_request'],
    ];
    for (const [payload, code] of cases) {
      const answer = await call('POST', '/volumes', payload);
      expect([answer.status, answer.body.error.code]).toEqual([400, code]);
    }
    expect((await call('GET', '/volumes/nope')).body.error.code).toBe('volume_not_found');
    expect((await call('GET', '/volumes?cursor=bogus')).body.error.code).toBe('invalid_request');
  });

  test('a volume snapshot with retentionMs is deleted once its time passes, not before', async () => {
    expect((await call('POST', '/volumes', { name: 'keep', sizeMiB: 16 })).status).toBe(201);
    const snap = await call('POST', '/volumes/keep/snapshots', { name: 'keep-1', retentionMs: 60_000 });
    expect(snap.body).toMatchObject({ kind: 'snapshot', expiresAt: '2026-12-02T08:01:00.000Z' });
    expect(await h.burrow.services.volumes.expire()).toEqual([]);
    nowMs += 61_000;
    expect(await h.burrow.services.volumes.expire()).toEqual([snap.body.id]);
    expect((await call('GET', '/volumes/keep-1')).status).toBe(404);
    expect((await call('GET', '/volumes/keep')).status).toBe(200);
    const snapOfSnap = await call('POST', '/volumes/keep/snapshots', { name: 'keep-2' });
    expect((await call('POST', `/volumes/${snapOfSnap.body.id}/snapshots`, { name: 'keep-3' })).body.error.code).toBe(
      'invalid_request',
    );
    expect((await call('POST', '/volumes/keep-2/resize', { sizeMiB: 32 })).body.error.code).toBe('invalid_request');
  });

  test('the quota shows volume count and bytes', async () => {
    const quota = (await call('GET', '/quota')).body;
    expect(quota.usage).toMatchObject({ volumes: 2, volumeBytes: 32 * 1024 * 1024 });
    expect(quota.limits).toMatchObject({ maxVolumes: null, maxVolumeBytes: null });
  });
});
