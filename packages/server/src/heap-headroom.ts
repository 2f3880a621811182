/**
 * Keeps V8's old-generation limit well above the live heap, so that the short-lived buffers of a big transfer do
 * not set off a storm of full collections.
 *
 * The mechanism (measured on Node 20.20 / V8 11.3; docs/files.md "Upload: heap headroom"):
 * - Node's HTTP parser copies each socket read of a request body (up to 64 KiB) into a new buffer outside V8's heap,
 *   and every `net.Socket` read (the exec agent's output) allocates one too. They die at once, but only a
 *   collection frees them.
 * - V8 collects the young generation for "external memory pressure" once 32 MiB of such buffers are young. Right
 *   after it, before they are swept, it counts them as external memory allocated since the last full collection,
 *   against the old generation's limit; and it starts marking whenever the limit is less than the young
 *   generation's capacity (16 MiB here) above the old generation.
 * - When collections are cheap, V8 puts the limit only 10 % (at least 8 MiB) above the live heap. The server's live
 *   heap is 30-50 MiB, so without headroom the limit sits 7-13 MiB above it, and every such young collection starts a
 *   full one: 50-64 full collections per 2 GiB upload, the server's CPU 10-14 s instead of 4.4-5.8 s.
 * - Forced headroom decides it (the same 2 GiB upload into a 30 MiB heap, `--heap-growing-percent`): 29 MiB above
 *   the live heap stormed in 4 of 4 uploads (51-55 full collections each); 60 MiB above it, in none (0-1).
 *
 * So after every full collection this sets V8's growing factor (`--heap-growing-percent`, read by V8 each time it
 * computes the limit) to keep at least `headroomMiB` above the live heap: a limit of twice the live heap or more,
 * never more than five times; once V8's own minimum of 10 % is that much, V8 chooses alone again.
 */
import { constants, PerformanceObserver } from 'node:perf_hooks';
import { getHeapStatistics, setFlagsFromString } from 'node:v8';

/** Headroom kept above the live heap by default: 48 MiB (the 32 MiB of young buffers plus a margin). */
export const DEFAULT_HEAP_HEADROOM_MIB = 48;
/** The smallest factor set: the limit at twice the live heap. */
const MIN_GROWING_PERCENT = 100;
/** The largest factor set: five times the live heap (a live heap under 12 MiB gets less than the headroom). */
const MAX_GROWING_PERCENT = 400;
/** V8's own smallest growing factor, 10 % (`kMinGrowingFactor` 1.1). */
const V8_MIN_GROWING_PERCENT = 10;

/**
 * The `--heap-growing-percent` that keeps `headroomMiB` above a live heap of `liveBytes`: between 100 and 400, or
 * 0 (V8's own choice) when the headroom is 0 or V8's minimum of 10 % already gives it.
 */
export function growingPercentFor(liveBytes: number, headroomMiB: number): number {
  const liveMiB = liveBytes / 2 ** 20;
  if (headroomMiB <= 0 || liveMiB * V8_MIN_GROWING_PERCENT >= headroomMiB * 100) return 0;
  const needed = Math.ceil((headroomMiB * 100) / Math.max(liveMiB, 1));
  return Math.min(MAX_GROWING_PERCENT, Math.max(MIN_GROWING_PERCENT, needed));
}

/** The installed policy: the factor it set last, and a way to hand the choice back to V8. */
export interface HeapHeadroom {
  /** The `--heap-growing-percent` set last (0: V8's own). */
  readonly growingPercent: number;
  /** Stop watching collections and give the growing factor back to V8. */
  close(): void;
}

/**
 * Apply {@link growingPercentFor} now and after every full collection of this process.
 * @param options.headroomMiB MiB kept above the live heap (default {@link DEFAULT_HEAP_HEADROOM_MIB}; 0 leaves V8
 *   alone and installs nothing)
 * @param options.setFlags sets a V8 flag (default `v8.setFlagsFromString`; injectable for tests)
 * @param options.liveBytes the live heap after a collection (default `v8.getHeapStatistics().used_heap_size`)
 */
export function installHeapHeadroom(
  options: { headroomMiB?: number; setFlags?: (flags: string) => void; liveBytes?: () => number } = {},
): HeapHeadroom {
  const headroomMiB = options.headroomMiB ?? DEFAULT_HEAP_HEADROOM_MIB;
  const setFlags = options.setFlags ?? setFlagsFromString;
  const liveBytes = options.liveBytes ?? (() => getHeapStatistics().used_heap_size);
  let current = 0;
  const apply = () => {
    const percent = growingPercentFor(liveBytes(), headroomMiB);
    if (percent === current) return;
    setFlags(`--heap-growing-percent=${percent}`);
    current = percent;
  };
  if (headroomMiB <= 0) return { growingPercent: 0, close: () => undefined };
  apply();
  const observer = new PerformanceObserver((list) => {
    const major = list
      .getEntries()
      .some(
        (entry) =>
          (entry as { detail?: { kind?: number } | null }).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR,
      );
    if (major) apply();
  });
  observer.observe({ entryTypes: ['gc'] });
  return {
    get growingPercent() {
      return current;
    },
    close() {
      observer.disconnect();
      if (current !== 0) setFlags('--heap-growing-percent=0');
      current = 0;
    },
  };
}
