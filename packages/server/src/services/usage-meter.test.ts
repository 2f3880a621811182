import { describe, expect, test } from 'vitest';
import { groupSlices, type MeterEvent, meterEvents, type UsageTotals } from './usage-meter.js';

const at = (iso: string) => Date.parse(iso);
let seq = 0;
function ev(
  type: string,
  sandboxId: string,
  iso: string,
  data: Record<string, unknown> = {},
  snapshotId?: string,
): MeterEvent {
  return { seq: ++seq, type, sandboxId, snapshotId: snapshotId ?? null, atMs: at(iso), data };
}
const res = (cpuCount: number, memoryMiB: number, diskMiB: number, labels: Record<string, string> = {}) => ({
  resources: { cpuCount, memoryMiB, diskMiB },
  labels,
});
const window = (from: string, to: string) => ({ fromMs: at(from), toMs: at(to) });
const total = (events: MeterEvent[], w: { fromMs: number; toMs: number }): UsageTotals =>
  groupSlices(meterEvents(events, w), { by: 'day' }).reduce(
    (sum, [, t]) => {
      for (const k of Object.keys(sum) as (keyof UsageTotals)[]) sum[k] += t[k];
      return sum;
    },
    {
      runningSeconds: 0,
      vcpuSeconds: 0,
      memoryGiBSeconds: 0,
      pausedSeconds: 0,
      stoppedSeconds: 0,
      diskGiBSeconds: 0,
      snapshotGiBSeconds: 0,
    },
  );

describe('usage meter (fixed clock)', () => {
  test('a pause at 12:00:00.500 stops the compute meter then; paused time pays disk only', () => {
    const events = [
      ev('created', 'sbx_a', '2026-12-01T11:59:00.000Z', res(2, 2048, 10240)),
      ev('paused', 'sbx_a', '2026-12-01T12:00:00.500Z'),
      ev('resumed', 'sbx_a', '2026-12-01T12:10:00.500Z'),
      ev('deleted', 'sbx_a', '2026-12-01T12:10:30.500Z'),
    ];
    const t = total(events, window('2026-12-01T00:00:00.000Z', '2026-12-02T00:00:00.000Z'));
    expect(t.runningSeconds).toBeCloseTo(60.5 + 30, 9);
    expect(t.vcpuSeconds).toBeCloseTo(2 * 90.5, 9);
    expect(t.memoryGiBSeconds).toBeCloseTo(2 * 90.5, 9);
    expect(t.pausedSeconds).toBeCloseTo(600, 9);
    expect(t.diskGiBSeconds).toBeCloseTo(600 * 10, 9);
    // Only up to 12:00:00.500 in a window ending later than the pause: the pause ends the compute meter exactly.
    const upToPause = total(events, window('2026-12-01T12:00:00.000Z', '2026-12-01T12:05:00.000Z'));
    expect(upToPause.runningSeconds).toBeCloseTo(0.5, 9);
    expect(upToPause.pausedSeconds).toBeCloseTo(299.5, 9);
  });

  test('stop, error, start, fork, a sandbox still running at the window end, and events after it', () => {
    const events = [
      ev('created', 'sbx_a', '2026-12-01T10:00:00.000Z', res(1, 1024, 2048)),
      ev('stopped', 'sbx_a', '2026-12-01T10:00:10.000Z'),
      ev('started', 'sbx_a', '2026-12-01T10:00:20.000Z'),
      ev('forked', 'sbx_b', '2026-12-01T10:00:30.000Z', res(4, 512, 1024)),
      ev('error', 'sbx_b', '2026-12-01T10:00:40.000Z'),
      ev('deleted', 'sbx_b', '2026-12-01T10:00:50.000Z'),
      ev('paused', 'sbx_a', '2026-12-01T11:00:00.000Z'),
    ];
    const slices = meterEvents(events, window('2026-12-01T10:00:00.000Z', '2026-12-01T10:01:00.000Z'));
    const bySandbox = Object.fromEntries(groupSlices(slices, { by: 'sandbox' }));
    expect(bySandbox.sbx_a).toMatchObject({
      runningSeconds: 50,
      vcpuSeconds: 50,
      stoppedSeconds: 10,
      diskGiBSeconds: 20,
    });
    expect(bySandbox.sbx_b).toMatchObject({
      runningSeconds: 10,
      vcpuSeconds: 40,
      memoryGiBSeconds: 5,
      stoppedSeconds: 10,
    });
  });

  test('snapshots: GiB-seconds from taken to deleted; group by label and by day (split at midnight)', () => {
    const events = [
      ev('created', 'sbx_a', '2026-12-01T23:59:00.000Z', res(1, 1024, 1024, { team: 'x' })),
      ev('created', 'sbx_b', '2026-12-01T23:59:00.000Z', res(1, 1024, 1024, {})),
      ev('snapshot_created', 'sbx_a', '2026-12-01T23:59:30.000Z', { sizeBytes: 2 * 1024 ** 3 }, 'snap_1'),
      ev('snapshot_deleted', 'sbx_a', '2026-12-02T00:00:30.000Z', {}, 'snap_1'),
    ];
    const slices = meterEvents(events, window('2026-12-01T00:00:00.000Z', '2026-12-02T00:01:00.000Z'));
    const byLabel = Object.fromEntries(groupSlices(slices, { by: 'label', key: 'team' }));
    expect(byLabel.x).toMatchObject({ runningSeconds: 120, snapshotGiBSeconds: 120 });
    expect(byLabel['']).toMatchObject({ runningSeconds: 120, snapshotGiBSeconds: 0 });
    const byDay = groupSlices(slices, { by: 'day' });
    expect(byDay.map(([day, t]) => [day, t.runningSeconds, t.snapshotGiBSeconds])).toEqual([
      ['2026-12-01', 120, 60],
      ['2026-12-02', 120, 60],
    ]);
  });

  test('events without metered facts take the fallback (rows from before); unknown ones count zero', () => {
    const events = [
      ev('created', 'sbx_old', '2026-12-01T12:00:00.000Z'),
      ev('created', 'sbx_lost', '2026-12-01T12:00:00.000Z'),
    ];
    const slices = meterEvents(events, window('2026-12-01T12:00:00.000Z', '2026-12-01T12:00:10.000Z'), (id) =>
      id === 'sbx_old' ? res(2, 1024, 1024) : null,
    );
    const bySandbox = Object.fromEntries(groupSlices(slices, { by: 'sandbox' }));
    expect(bySandbox.sbx_old?.vcpuSeconds).toBe(20);
    expect(bySandbox.sbx_lost?.vcpuSeconds).toBe(0);
  });
});
