import { join } from 'node:path';
import { ErrorEnvelopeSchema, SandboxSchema, UsageReportSchema } from '@burrow/contract';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { UsageService } from '../../packages/server/src/services/usage-service.js';
import { EventStore } from '../../packages/server/src/store/event-store.js';
import { openStore } from '../../packages/server/src/store/store.js';
import type { Clock } from '../../packages/server/src/util/clock.js';
import { type Harness, startHarness } from './api-harness.js';

// A fixed clock moved by hand: every event's time is exactly where the test puts it.
let nowMs = Date.parse('2026-12-01T11:59:00.000Z');
const clock: Clock = { nowMs: () => nowMs };
let h: Harness;
beforeAll(async () => {
  h = await startHarness({ clock });
});
afterAll(async () => {
  await h?.close();
});

async function call(method: string, url: string, headers = h.admin, payload?: unknown) {
  return h.burrow.app.inject({
    method: method as 'GET',
    url: `/v1${url}`,
    headers,
    ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }),
  });
}
const DAY = 'from=2026-12-01T00:00:00.000Z&to=2026-12-02T00:00:00.000Z';

describe('usage', () => {
  test('pause at 12:00:00.500 stops the compute meter then; a fresh reader of the same database agrees', async () => {
    const created = await call('POST', '/sandboxes', h.admin, {
      cpuCount: 2,
      memoryMiB: 2048,
      diskMiB: 10240,
      labels: { team: 'x' },
    });
    expect(created.statusCode, created.body).toBe(201);
    const id = SandboxSchema.parse(created.json()).id;
    const other = SandboxSchema.parse((await call('POST', '/sandboxes', h.admin, {})).json()).id;
    nowMs = Date.parse('2026-12-01T12:00:00.500Z');
    expect((await call('POST', `/sandboxes/${id}/pause`)).statusCode).toBe(200);
    nowMs = Date.parse('2026-12-01T12:10:00.500Z');
    expect((await call('POST', `/sandboxes/${id}/resume`)).statusCode).toBe(200);
    nowMs = Date.parse('2026-12-01T12:10:30.500Z');
    expect((await call('DELETE', `/sandboxes/${id}`)).statusCode).toBe(204);
    await h.burrow.services.events.flush();
    nowMs = Date.parse('2026-12-01T12:20:00.000Z');

    const res = await call('GET', `/usage?${DAY}`);
    expect(res.statusCode, res.body).toBe(200);
    const report = UsageReportSchema.parse(res.json());
    const mine = report.groups.find((g) => g.key === id);
    expect(mine).toMatchObject({
      runningSeconds: 90.5,
      vcpuSeconds: 181,
      memoryGiBSeconds: 181,
      pausedSeconds: 600,
      diskGiBSeconds: 6000,
    });
    // The other sandbox runs from 11:59:00 to the window's end, bounded by now (12:20:00).
    expect(report.groups.find((g) => g.key === other)?.runningSeconds).toBe(21 * 60);

    const byLabel = UsageReportSchema.parse((await call('GET', `/usage?${DAY}&groupBy=label:team`)).json());
    expect(byLabel.groups.map((g) => [g.key, g.runningSeconds])).toEqual([
      ['', 21 * 60],
      ['x', 90.5],
    ]);
    const byDay = UsageReportSchema.parse((await call('GET', `/usage?${DAY}&groupBy=day`)).json());
    expect(byDay.groups.map((g) => g.key)).toEqual(['2026-12-01']);
    expect(byDay.total).toEqual(report.total);

    // Usage is a function of the stored events alone: a reader started afresh on the same database (as after a
    // kill -9 and a restart) answers the same.
    const store = openStore(join(h.dataDir, 'burrow.db'));
    try {
      const fresh = new UsageService({ events: new EventStore(store.db), sandboxes: store.sandboxes, clock });
      const again = await fresh.report(
        { keyId: 'key_x', tenantId: 'default', role: 'admin' },
        { from: '2026-12-01T00:00:00.000Z', to: '2026-12-02T00:00:00.000Z', groupBy: 'sandbox' },
      );
      expect(again).toEqual(report);
    } finally {
      await store.close();
    }

    const metrics = await h.burrow.app.inject({ method: 'GET', url: '/metrics', headers: h.admin });
    expect(metrics.body).toMatch(/burrow_usage_vcpu_seconds_total\{tenant="default"\} \d+/);
  });

  test('bad input and other tenants', async () => {
    const late = await call('GET', '/usage?from=2026-12-02T00:00:00.000Z&to=2026-12-01T00:00:00.000Z');
    expect(late.statusCode).toBe(400);
    expect(ErrorEnvelopeSchema.parse(late.json()).error.message).toMatch(/`from` is after `to`/);
    expect((await call('GET', '/usage?groupBy=tenant')).statusCode).toBe(400);
    const member = (await call('POST', '/keys', h.admin, { name: 'm', tenantId: 'other' })).json() as {
      secret: string;
    };
    const asMember = { authorization: `Bearer ${member.secret}` };
    expect((await call('GET', '/usage', asMember)).statusCode).toBe(200);
    expect((await call('GET', '/usage?tenant=default', asMember)).statusCode).toBe(403);
  });
});
