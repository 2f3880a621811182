import type { Sandbox } from '@burrow/contract';
import { ErrorCode } from '@burrow/contract';
import type { ActivityTracker } from '../lifecycle/activity-tracker.js';
import { extendedTimeoutAt } from '../lifecycle/lifecycle-policy.js';
import type { SandboxLifecycle, SandboxStore } from '../store/sandbox-store.js';
import type { SnapshotStore } from '../store/snapshot-store.js';
import { ApiError } from '../util/api-error.js';
import { type Clock, isoNow } from '../util/clock.js';
import type { KeyedMutex } from '../util/keyed-mutex.js';
import type { Principal } from './key-service.js';
import { type SandboxService, toSandboxSeen } from './sandbox-service.js';

/** A policy update after contract parsing: fields left out stay. */
export interface UpdatePoliciesInput {
  timeoutMs?: number | null | undefined;
  timeoutAction?: SandboxLifecycle['timeoutAction'] | undefined;
  idleTimeoutMs?: number | null | undefined;
  maxAgeMs?: number | null | undefined;
  pausedRetentionMs?: number | null | undefined;
  snapshotKeepLast?: number | null | undefined;
  /** The new default environment (replaces the old one whole); new commands and later fork children get it. */
  env?: Record<string, string> | undefined;
}

/**
 * Changes a sandbox's lifecycle policies and records keepalives. Each policy is its own column: changing one
 * never moves another's deadline; a keepalive only ever moves the TTL deadline later.
 */
export class PolicyService {
  constructor(
    private readonly deps: {
      sandboxes: SandboxStore;
      snapshots: SnapshotStore;
      service: SandboxService;
      activity: ActivityTracker;
      mutex: KeyedMutex;
      clock: Clock;
    },
  ) {}

  /**
   * Change the named policies and the default environment. A new `timeoutMs` counts from now (this call may shorten
   * the TTL: it names it).
   * @throws ApiError `sandbox_not_found`, `conflict` (the row changed meanwhile; retry)
   */
  async update(caller: Principal, id: string, input: UpdatePoliciesInput): Promise<Sandbox> {
    return this.deps.mutex.run(id, async () => {
      const record = await this.deps.service.require(caller.tenantId, id);
      const nowMs = this.deps.clock.nowMs();
      const lifecycle: Partial<SandboxLifecycle> = {};
      if (input.timeoutAction !== undefined) lifecycle.timeoutAction = input.timeoutAction;
      if (input.idleTimeoutMs !== undefined) lifecycle.idleTimeoutMs = input.idleTimeoutMs;
      if (input.maxAgeMs !== undefined) lifecycle.maxAgeMs = input.maxAgeMs;
      if (input.pausedRetentionMs !== undefined) lifecycle.pausedRetentionMs = input.pausedRetentionMs;
      if (input.snapshotKeepLast !== undefined) lifecycle.snapshotKeepLast = input.snapshotKeepLast;
      const timeout =
        input.timeoutMs === undefined
          ? {}
          : {
              timeoutMs: input.timeoutMs,
              expiresAt: toIso(extendedTimeoutAt(nowMs, input.timeoutMs, null, { allowShorten: true })),
            };
      // Any policy change can move the deletion deadline: a warning for the old one no longer counts (env cannot).
      const policyChanged = input.timeoutMs !== undefined || Object.keys(lifecycle).length > 0;
      // A policy this call names comes from a request from now on.
      const previous = record.lifecycle?.policySources ?? null;
      if (policyChanged && previous !== null) {
        const named = Object.keys(lifecycle).concat(input.timeoutMs === undefined ? [] : ['timeoutMs']);
        lifecycle.policySources = { ...previous, ...Object.fromEntries(named.map((k) => [k, 'request'])) };
      }
      const updated = await this.deps.sandboxes.update(
        record.tenantId,
        id,
        record.version,
        {
          ...timeout,
          ...(input.env === undefined ? {} : { env: input.env }),
          ...(policyChanged ? { lifecycle: { ...lifecycle, expiryWarnedFor: null, expiryWarnedAt: null } } : {}),
        },
        isoNow(this.deps.clock),
      );
      if (updated === null) throw conflict(id);
      return toSandboxSeen(updated, this.deps.service.activityOf(id));
    });
  }

  /**
   * Count the sandbox as active now (and for `durationMs` more), and push the TTL to at least now + `timeoutMs`.
   * Works on paused sandboxes too, without resuming them.
   * @throws ApiError `sandbox_not_found`, `conflict`
   */
  async keepalive(
    caller: Principal,
    id: string,
    input: { durationMs: number; extendTimeout: boolean },
  ): Promise<Sandbox> {
    return this.deps.mutex.run(id, async () => {
      const record = await this.deps.service.require(caller.tenantId, id);
      this.deps.activity.lease(id, input.durationMs);
      const nowMs = this.deps.clock.nowMs();
      const currentMs = record.expiresAt === null ? null : Date.parse(record.expiresAt);
      const nextMs =
        input.extendTimeout && record.timeoutMs !== null
          ? extendedTimeoutAt(nowMs, record.timeoutMs, currentMs, { allowShorten: false })
          : currentMs;
      if (nextMs === currentMs) return toSandboxSeen(record, this.deps.service.activityOf(id));
      const updated = await this.deps.sandboxes.update(
        record.tenantId,
        id,
        record.version,
        { expiresAt: toIso(nextMs) },
        isoNow(this.deps.clock),
      );
      if (updated === null) throw conflict(id);
      return toSandboxSeen(updated, this.deps.service.activityOf(id));
    });
  }
}

function toIso(epochMs: number | null): string | null {
  return epochMs === null ? null : new Date(epochMs).toISOString();
}

function conflict(id: string): ApiError {
  return new ApiError(ErrorCode.conflict, `sandbox ${id} changed meanwhile`, { hint: 'retry' });
}
