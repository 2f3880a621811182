/**
 * Usage metering as a pure function of the durable event log: the same events give the same usage, whatever
 * restarts happened between them. Each sandbox is a state machine over its transition events; the time between two
 * events is charged to the state the first one entered.
 */

/** One event as the meter reads it. */
export interface MeterEvent {
  seq: number;
  type: string;
  sandboxId: string | null;
  snapshotId: string | null;
  atMs: number;
  data: Record<string, unknown>;
}

/** Resources of a sandbox. */
export interface MeterResources {
  cpuCount: number;
  memoryMiB: number;
  diskMiB: number;
}

/** Usage of one group (sandbox, label value or day). Seconds and GiB-seconds; GiB = 1024 MiB. */
export interface UsageTotals {
  runningSeconds: number;
  /** Running seconds × vCPUs. */
  vcpuSeconds: number;
  /** Running seconds × GiB of memory. */
  memoryGiBSeconds: number;
  pausedSeconds: number;
  /** Stopped (or in error, disk kept) seconds. */
  stoppedSeconds: number;
  /** Paused and stopped seconds × GiB of disk (a running sandbox pays compute instead). */
  diskGiBSeconds: number;
  /** Seconds × GiB of each snapshot kept. */
  snapshotGiBSeconds: number;
}

/** One metered interval, before grouping. */
export interface UsageSlice {
  sandboxId: string;
  labels: Record<string, string>;
  startMs: number;
  endMs: number;
  totals: UsageTotals;
}

type MeterState = 'running' | 'paused' | 'stopped' | 'gone';

/** The state each transition event enters; events not listed leave the state as it is. */
const ENTERS: Readonly<Record<string, MeterState>> = {
  created: 'running',
  forked: 'running',
  started: 'running',
  resumed: 'running',
  paused: 'paused',
  stopped: 'stopped',
  error: 'stopped',
  deleted: 'gone',
};

const GIB_MIB = 1024;
const GIB_BYTES = 1024 ** 3;

/** A totals record of zeros. */
export function zeroTotals(): UsageTotals {
  return {
    runningSeconds: 0,
    vcpuSeconds: 0,
    memoryGiBSeconds: 0,
    pausedSeconds: 0,
    stoppedSeconds: 0,
    diskGiBSeconds: 0,
    snapshotGiBSeconds: 0,
  };
}

/** Add `b` into `a`. */
export function addTotals(a: UsageTotals, b: UsageTotals): void {
  for (const key of Object.keys(a) as (keyof UsageTotals)[]) a[key] += b[key];
}

function resourcesOf(data: Record<string, unknown>): MeterResources | null {
  const r = data.resources as Partial<MeterResources> | undefined;
  if (r === undefined || typeof r.cpuCount !== 'number' || typeof r.memoryMiB !== 'number') return null;
  return { cpuCount: r.cpuCount, memoryMiB: r.memoryMiB, diskMiB: typeof r.diskMiB === 'number' ? r.diskMiB : 0 };
}

function charge(state: MeterState, seconds: number, res: MeterResources): UsageTotals {
  const t = zeroTotals();
  if (state === 'running') {
    t.runningSeconds = seconds;
    t.vcpuSeconds = seconds * res.cpuCount;
    t.memoryGiBSeconds = (seconds * res.memoryMiB) / GIB_MIB;
  } else if (state === 'paused' || state === 'stopped') {
    if (state === 'paused') t.pausedSeconds = seconds;
    else t.stoppedSeconds = seconds;
    t.diskGiBSeconds = (seconds * res.diskMiB) / GIB_MIB;
  }
  return t;
}

/**
 * Meter `events` (every transition and snapshot event of a tenant up to `toMs`, in seq order) over the window
 * [`fromMs`, `toMs`).
 * @param fallback resources and labels of a sandbox whose events predate metered facts (its current row), if known
 * @returns one slice per (sandbox or snapshot, state interval) inside the window; snapshot slices carry the
 *   snapshot's sandbox id
 */
export function meterEvents(
  events: readonly MeterEvent[],
  window: { fromMs: number; toMs: number },
  fallback: (sandboxId: string) => { resources: MeterResources; labels: Record<string, string> } | null = () => null,
): UsageSlice[] {
  const slices: UsageSlice[] = [];
  const clip = (startMs: number, endMs: number): [number, number] | null => {
    const s = Math.max(startMs, window.fromMs);
    const e = Math.min(endMs, window.toMs);
    return e > s ? [s, e] : null;
  };
  const sandboxes = new Map<
    string,
    { state: MeterState; sinceMs: number; resources: MeterResources; labels: Record<string, string> }
  >();
  const snapshots = new Map<string, { sandboxId: string; sinceMs: number; sizeBytes: number }>();
  const closeSandbox = (id: string, atMs: number) => {
    const s = sandboxes.get(id);
    if (s === undefined || s.state === 'gone') return;
    const range = clip(s.sinceMs, atMs);
    if (range === null) return;
    const totals = charge(s.state, (range[1] - range[0]) / 1000, s.resources);
    slices.push({ sandboxId: id, labels: s.labels, startMs: range[0], endMs: range[1], totals });
  };
  const closeSnapshot = (id: string, atMs: number) => {
    const s = snapshots.get(id);
    if (s === undefined) return;
    const range = clip(s.sinceMs, atMs);
    if (range === null) return;
    const totals = zeroTotals();
    totals.snapshotGiBSeconds = (((range[1] - range[0]) / 1000) * s.sizeBytes) / GIB_BYTES;
    const labels = sandboxes.get(s.sandboxId)?.labels ?? {};
    slices.push({ sandboxId: s.sandboxId, labels, startMs: range[0], endMs: range[1], totals });
  };

  for (const e of events) {
    if (e.atMs >= window.toMs) break;
    if (e.type === 'snapshot_created' && e.snapshotId !== null) {
      const size = typeof e.data.sizeBytes === 'number' ? e.data.sizeBytes : 0;
      snapshots.set(e.snapshotId, { sandboxId: e.sandboxId ?? '', sinceMs: e.atMs, sizeBytes: size });
      continue;
    }
    if (e.type === 'snapshot_deleted' && e.snapshotId !== null) {
      closeSnapshot(e.snapshotId, e.atMs);
      snapshots.delete(e.snapshotId);
      continue;
    }
    const enters = ENTERS[e.type];
    if (enters === undefined || e.sandboxId === null) continue;
    closeSandbox(e.sandboxId, e.atMs);
    const previous = sandboxes.get(e.sandboxId);
    const known = fallback(e.sandboxId);
    const resources = resourcesOf(e.data) ??
      previous?.resources ??
      known?.resources ?? { cpuCount: 0, memoryMiB: 0, diskMiB: 0 };
    const labels = (e.data.labels as Record<string, string> | undefined) ?? previous?.labels ?? known?.labels ?? {};
    sandboxes.set(e.sandboxId, { state: enters, sinceMs: e.atMs, resources, labels });
  }
  for (const id of sandboxes.keys()) closeSandbox(id, window.toMs);
  for (const id of snapshots.keys()) closeSnapshot(id, window.toMs);
  return slices;
}

/** How {@link groupSlices} groups: by sandbox, by the value of one label, or by UTC day. */
export type UsageGrouping = { by: 'sandbox' } | { by: 'label'; key: string } | { by: 'day' };

const DAY_MS = 86_400_000;

/** Split a slice at UTC midnights, scaling its totals to each part's share of its time. */
function splitByDay(slice: UsageSlice): Array<{ day: string; totals: UsageTotals }> {
  const parts: Array<{ day: string; totals: UsageTotals }> = [];
  const length = slice.endMs - slice.startMs;
  for (let start = slice.startMs; start < slice.endMs; ) {
    const midnight = (Math.floor(start / DAY_MS) + 1) * DAY_MS;
    const end = Math.min(midnight, slice.endMs);
    const share = (end - start) / length;
    const totals = zeroTotals();
    for (const key of Object.keys(totals) as (keyof UsageTotals)[]) totals[key] = slice.totals[key] * share;
    parts.push({ day: new Date(start).toISOString().slice(0, 10), totals });
    start = end;
  }
  return parts;
}

/**
 * Sum slices into groups, in key order (a sandbox without the label groups under `""`).
 * @returns `[key, totals]` pairs
 */
export function groupSlices(slices: readonly UsageSlice[], grouping: UsageGrouping): Array<[string, UsageTotals]> {
  const groups = new Map<string, UsageTotals>();
  const add = (key: string, totals: UsageTotals) => {
    const sum = groups.get(key) ?? zeroTotals();
    addTotals(sum, totals);
    groups.set(key, sum);
  };
  for (const slice of slices) {
    if (grouping.by === 'sandbox') add(slice.sandboxId, slice.totals);
    else if (grouping.by === 'label') add(slice.labels[grouping.key] ?? '', slice.totals);
    else for (const part of splitByDay(slice)) add(part.day, part.totals);
  }
  return [...groups.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}
