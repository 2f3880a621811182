import { describe, expect, it } from 'vitest';
import { growingPercentFor, installHeapHeadroom } from './heap-headroom.js';

const MiB = 2 ** 20;

describe('growingPercentFor', () => {
  it('keeps the headroom above a small live heap, between twice and five times the live heap', () => {
    // 30 MiB live: 48 MiB above it needs 160 %.
    expect(growingPercentFor(30 * MiB, 48)).toBe(160);
    // 80 MiB live: 60 % would do, but never less than twice the live heap.
    expect(growingPercentFor(80 * MiB, 48)).toBe(100);
    // 6 MiB live: 800 % would be needed, capped at five times.
    expect(growingPercentFor(6 * MiB, 48)).toBe(400);
    expect(growingPercentFor(0, 48)).toBe(400);
  });

  it('hands the choice back to V8 once its own 10 % minimum gives the headroom, or when the headroom is 0', () => {
    expect(growingPercentFor(480 * MiB, 48)).toBe(0);
    expect(growingPercentFor(479 * MiB, 48)).toBe(100);
    expect(growingPercentFor(30 * MiB, 0)).toBe(0);
  });
});

describe('installHeapHeadroom', () => {
  it('sets the factor at once, again after a full collection when the live heap changed, and resets it on close', async () => {
    const flags: string[] = [];
    let live = 30 * MiB;
    const heap = installHeapHeadroom({ headroomMiB: 48, setFlags: (f) => flags.push(f), liveBytes: () => live });
    try {
      expect(flags).toEqual(['--heap-growing-percent=160']);
      expect(heap.growingPercent).toBe(160);
      live = 60 * MiB;
      // A real full collection; the observer hears of it asynchronously.
      const { setFlagsFromString } = await import('node:v8');
      const { runInNewContext } = await import('node:vm');
      setFlagsFromString('--expose-gc');
      const gc = runInNewContext('gc') as () => void;
      setFlagsFromString('--no-expose-gc');
      gc();
      await expect.poll(() => heap.growingPercent, { timeout: 5000 }).toBe(100);
      expect(flags).toEqual(['--heap-growing-percent=160', '--heap-growing-percent=100']);
    } finally {
      heap.close();
    }
    expect(flags.at(-1)).toBe('--heap-growing-percent=0');
    expect(heap.growingPercent).toBe(0);
  });

  it('installs nothing when the headroom is 0', () => {
    const flags: string[] = [];
    const heap = installHeapHeadroom({ headroomMiB: 0, setFlags: (f) => flags.push(f), liveBytes: () => MiB });
    heap.close();
    expect(flags).toEqual([]);
  });
});
