import type { EventType, UsageReport } from '@burrow/contract';
import { ErrorCode } from '@burrow/contract';
import type { EventRecord, EventStore } from '../store/event-store.js';
import type { SandboxStore } from '../store/sandbox-store.js';
import { ApiError } from '../util/api-error.js';
import type { Clock } from '../util/clock.js';
import type { Principal } from './key-service.js';
import {
  addTotals,
  groupSlices,
  type MeterEvent,
  type MeterResources,
  meterEvents,
  type UsageGrouping,
  type UsageTotals,
  zeroTotals,
} from './usage-meter.js';

/** The events the meter reads. */
const METERED_TYPES: readonly EventType[] = [
  'created',
  'forked',
  'started',
  'resumed',
  'paused',
  'stopped',
  'error',
  'deleted',
  'snapshot_created',
  'snapshot_deleted',
];
const PAGE = 5000;
const DAY_MS = 86_400_000;

function toMeterEvent(e: EventRecord): MeterEvent {
  return {
    seq: e.seq,
    type: e.type,
    sandboxId: e.sandboxId,
    snapshotId: e.snapshotId,
    atMs: Date.parse(e.at),
    data: e.data,
  };
}

function groupingOf(groupBy: string): UsageGrouping {
  if (groupBy === 'day') return { by: 'day' };
  if (groupBy.startsWith('label:')) return { by: 'label', key: groupBy.slice('label:'.length) };
  return { by: 'sandbox' };
}

/**
 * Usage metering: per-second usage derived from the durable event log only (`usage-meter.ts`), so a restart loses
 * nothing and counts nothing twice.
 */
export class UsageService {
  constructor(private readonly deps: { events: EventStore; sandboxes: SandboxStore; clock: Clock }) {}

  /**
   * The caller's tenant's usage (or `tenant`'s, for an admin key) over [`from`, `to`), grouped; time after now is
   * not charged.
   * @throws ApiError `forbidden` when a non-admin key names another tenant
   */
  async report(
    caller: Principal,
    query: { from?: string | undefined; to?: string | undefined; groupBy: string; tenant?: string | undefined },
  ): Promise<UsageReport> {
    const tenantId = query.tenant ?? caller.tenantId;
    if (tenantId !== caller.tenantId && caller.role !== 'admin') {
      throw new ApiError(ErrorCode.forbidden, `reading tenant ${tenantId}'s usage needs an admin key`, {
        hint: `a key reads its own tenant's usage (${caller.tenantId})`,
      });
    }
    const toMs = query.to === undefined ? this.deps.clock.nowMs() : Date.parse(query.to);
    const fromMs = query.from === undefined ? toMs - DAY_MS : Date.parse(query.from);
    const events = await this.eventsOf(tenantId, toMs);
    const fallback = await this.fallbackOf(tenantId, events);
    // Nothing is charged past now: a window reaching into the future ends at the present.
    const meteredToMs = Math.min(toMs, this.deps.clock.nowMs());
    const slices = meterEvents(events, { fromMs, toMs: meteredToMs }, (id) => fallback.get(id) ?? null);
    const groups = groupSlices(slices, groupingOf(query.groupBy));
    const total = zeroTotals();
    for (const [, totals] of groups) addTotals(total, totals);
    return {
      tenantId,
      from: new Date(fromMs).toISOString(),
      to: new Date(toMs).toISOString(),
      groupBy: query.groupBy,
      groups: groups.map(([key, totals]) => ({ key, ...totals })),
      total,
    };
  }

  /** Usage of every tenant from the first event to now (the Prometheus counters). */
  async totalsByTenant(): Promise<Map<string, UsageTotals>> {
    const nowMs = this.deps.clock.nowMs();
    const byTenant = new Map<string, MeterEvent[]>();
    for (let after = 0; ; ) {
      const page = await this.deps.events.listOfTypes(null, { afterSeq: after, limit: PAGE, types: METERED_TYPES });
      for (const e of page) {
        const list = byTenant.get(e.tenantId) ?? [];
        list.push(toMeterEvent(e));
        byTenant.set(e.tenantId, list);
      }
      if (page.length < PAGE) break;
      after = page.at(-1)?.seq ?? after;
    }
    const result = new Map<string, UsageTotals>();
    for (const [tenantId, events] of byTenant) {
      const total = zeroTotals();
      for (const slice of meterEvents(events, { fromMs: 0, toMs: nowMs })) addTotals(total, slice.totals);
      result.set(tenantId, total);
    }
    return result;
  }

  private async eventsOf(tenantId: string, toMs: number): Promise<MeterEvent[]> {
    const events: MeterEvent[] = [];
    for (let after = 0; ; ) {
      const page = await this.deps.events.listOfTypes(tenantId, { afterSeq: after, limit: PAGE, types: METERED_TYPES });
      for (const e of page) events.push(toMeterEvent(e));
      const last = page.at(-1);
      if (page.length < PAGE || last === undefined || Date.parse(last.at) >= toMs) break;
      after = last.seq;
    }
    return events;
  }

  /** Current rows of sandboxes whose events predate metered facts. */
  private async fallbackOf(
    tenantId: string,
    events: readonly MeterEvent[],
  ): Promise<Map<string, { resources: MeterResources; labels: Record<string, string> }>> {
    const ids = new Set(
      events.filter((e) => e.sandboxId !== null && e.data.resources === undefined).map((e) => e.sandboxId as string),
    );
    const rows = new Map<string, { resources: MeterResources; labels: Record<string, string> }>();
    for (const id of ids) {
      const row = await this.deps.sandboxes.get(tenantId, id);
      if (row !== null) {
        rows.set(id, {
          resources: { cpuCount: row.cpuCount, memoryMiB: row.memoryMiB, diskMiB: row.diskMiB },
          labels: row.labels,
        });
      }
    }
    return rows;
  }
}
