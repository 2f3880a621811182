import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import type { SandboxRecord } from '../store/sandbox-store.js';
import { MetricsSampler } from './metrics-sampler.js';

/** A FAKE driver and store: cgroup counters and rows set by the test. */
function setup() {
  let nowMs = Date.parse('2026-01-01T00:00:00Z');
  const usage = new Map<string, { cpuNs: number; memoryBytes: number }>();
  let rows: Pick<SandboxRecord, 'id' | 'state'>[] = [];
  const sampler = new MetricsSampler({
    sandboxes: { listAcrossTenants: async () => rows as SandboxRecord[] },
    driver: {
      resourceUsage: async (id) => usage.get(id) ?? null,
      diskUsageBytes: async () => 4096,
    },
    clock: { nowMs: () => nowMs },
    logger: pino({ level: 'silent' }),
    intervalMs: 1000,
    windowMs: 3000,
    diskEverySamples: 2,
  });
  return {
    sampler,
    usage,
    setRows: (next: Pick<SandboxRecord, 'id' | 'state'>[]) => {
      rows = next;
    },
    advance: (ms: number) => {
      nowMs += ms;
    },
  };
}

describe('MetricsSampler', () => {
  it('turns CPU counters into percent of a core, samples disk every n-th time, keeps a bounded window', async () => {
    const t = setup();
    t.setRows([
      { id: 'sbx_a', state: 'running' },
      { id: 'sbx_p', state: 'paused' },
    ]);
    t.usage.set('sbx_a', { cpuNs: 0, memoryBytes: 100 });
    t.usage.set('sbx_p', { cpuNs: 0, memoryBytes: 100 });
    await t.sampler.sampleOnce();
    t.advance(1000);
    t.usage.set('sbx_a', { cpuNs: 500_000_000, memoryBytes: 200 });
    await t.sampler.sampleOnce();
    const samples = t.sampler.samplesOf('sbx_a');
    expect(samples.map((s) => s.cpuPercent)).toEqual([null, 50]);
    expect(samples.map((s) => s.memoryBytes)).toEqual([100, 200]);
    expect(samples.map((s) => s.diskBytes)).toEqual([4096, null]);
    expect(t.sampler.samplesOf('sbx_p')).toEqual([]);
    for (let i = 0; i < 5; i++) {
      t.advance(1000);
      await t.sampler.sampleOnce();
    }
    expect(t.sampler.samplesOf('sbx_a').length).toBe(4);
  });

  it('forgets a sandbox that is gone', async () => {
    const t = setup();
    t.setRows([{ id: 'sbx_a', state: 'running' }]);
    t.usage.set('sbx_a', { cpuNs: 0, memoryBytes: 1 });
    await t.sampler.sampleOnce();
    expect(t.sampler.samplesOf('sbx_a').length).toBe(1);
    t.setRows([]);
    await t.sampler.sampleOnce();
    expect(t.sampler.samplesOf('sbx_a')).toEqual([]);
  });
});
