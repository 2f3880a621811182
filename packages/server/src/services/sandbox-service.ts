import type {
  Condition,
  NetworkPolicyRequestParsed,
  Resources,
  Sandbox,
  SandboxList,
  SandboxSecretRequest,
  SandboxState,
} from '@burrow/contract';
import { DEFAULT_RESOURCES, ErrorCode } from '@burrow/contract';
import { crashPoint, type RuntimeDriver } from '@burrow/runtime';
import type { Logger } from 'pino';
import type { ActivitySnapshot, ActivityTracker } from '../lifecycle/activity-tracker.js';
import { lifecycleView } from '../lifecycle/expiry-view.js';
import {
  BUILTIN_POLICY_DEFAULTS,
  type PolicyDefaults,
  resolvePolicies,
  type TenantPolicySettings,
} from '../lifecycle/policy-defaults.js';
import { expiresAtFor } from '../lifecycle/ttl-policy.js';
import type { WithInTransaction } from '../store/in-transaction.js';
import {
  DEFAULT_LIFECYCLE,
  type SandboxLifecycle,
  type SandboxRecord,
  type SandboxStore,
  withConditions,
} from '../store/sandbox-store.js';
import type { SnapshotStore } from '../store/snapshot-store.js';
import { ApiError, sandboxNotFound } from '../util/api-error.js';
import { type Clock, isoNow } from '../util/clock.js';
import { decodeCursor, encodeCursor } from '../util/cursor.js';
import { newId } from '../util/ids.js';
import type { KeyedMutex } from '../util/keyed-mutex.js';
import type { BlobStore } from './blob-store.js';
import type { EventService } from './event-service.js';
import type { HostCapacity } from './host-capacity.js';
import type { Principal } from './key-service.js';
import type { Metrics } from './metrics.js';
import { type NetworkSettings, networkView, resolveNetworkPolicy } from './network-service.js';
import { PersistenceService, runtimeFailure } from './persistence-service.js';
import type { SandboxSecretsPlan, SecretService } from './secret-service.js';
import type { TemplateService } from './template-service.js';
import type { MountRequest, VolumeService } from './volume-service.js';
import type { WarmPool } from './warm-pool.js';

/** A create request after contract defaults are applied. */
export interface CreateSandboxInput {
  template: string;
  env: Record<string, string>;
  cwd: string;
  cpuCount?: number | undefined;
  memoryMiB?: number | undefined;
  diskMiB?: number | undefined;
  labels: Record<string, string>;
  /** Each policy left out (undefined) takes the server default ({@link SandboxServiceDeps.policyDefaults}). */
  timeoutMs?: number | null | undefined;
  timeoutAction?: SandboxLifecycle['timeoutAction'] | undefined;
  idleTimeoutMs?: number | null | undefined;
  maxAgeMs?: number | null | undefined;
  pausedRetentionMs?: number | null | undefined;
  snapshotKeepLast?: number | null | undefined;
  /** @default true */
  autoResume?: boolean | undefined;
  /** Snapshot name or id to start from. */
  fromSnapshot?: string | undefined;
  /** With `fromSnapshot`: restore memory. @default true */
  restoreMemory?: boolean | undefined;
  /** Network policy; absent: {@link NetworkSettings.defaultMode} with no rules. */
  network?: NetworkPolicyRequestParsed | undefined;
  /** Secrets whose placeholders go into env vars (see {@link SecretService.plan}). */
  secrets?: SandboxSecretRequest[] | undefined;
  /** Volumes to mount. @default none */
  volumes?: readonly MountRequest[] | undefined;
}

/** List query after contract parsing. */
export interface ListSandboxesInput {
  state?: SandboxState | undefined;
  label: string[];
  limit: number;
  cursor?: string | undefined;
  parentId?: string | undefined;
}

/** Dependencies of the sandbox services. */
export interface SandboxServiceDeps {
  /** Records `created` for sandboxes claimed from the warm pool (absent: not recorded). */
  events?: EventService | undefined;
  /** Activity for the idle policy: the HTTP activity hook touches it (absent: not tracked). */
  activity?: ActivityTracker | undefined;
  /** Warning time before a deletion by policy, ms, to show a warned deletion when it happens (absent: at its deadline). */
  expiryWarningMs?: number | undefined;
  /** Policies a create request leaves out (main.ts reads them from BURROW_DEFAULT_*). @default BUILTIN_POLICY_DEFAULTS */
  policyDefaults?: Readonly<PolicyDefaults> | undefined;
  /** Per-tenant defaults, applied between the request and {@link policyDefaults} (absent: none). */
  tenantDefaults?: { settings(tenantId: string): Promise<TenantPolicySettings> } | undefined;
  sandboxes: SandboxStore;
  templates: TemplateService;
  driver: RuntimeDriver;
  capacity: HostCapacity;
  snapshots: SnapshotStore;
  blobs: BlobStore;
  mutex: KeyedMutex;
  clock: Clock;
  logger: Logger;
  /** Latency, create results, cleanup lag (absent: not recorded). */
  metrics?: Metrics | undefined;
  /** Ready sandboxes a create may claim instead of booting one (absent: every create is cold). */
  pool?: WarmPool | undefined;
  /** The operator's network defaults. @default `{ defaultMode: 'none' }` */
  network?: NetworkSettings | undefined;
  /** Secrets at egress (absent: a create with `secrets` is refused as `unsupported`). */
  secrets?: SecretService | undefined;
  /** Puts the egress CA into a new sandbox's trust stores (absent: nothing is installed). */
  installSecretTrust?: ((sandboxId: string) => Promise<void>) | undefined;
  /** Volume mounts of sandboxes (absent: a create that asks for volumes is refused). */
  volumes?: VolumeService | undefined;
}

/** The API view of a sandbox row. */
export function toSandbox(r: SandboxRecord): Sandbox {
  return toSandboxSeen(r, null);
}

/** The API view of a sandbox row, its idle deadline from what the activity tracker knows (null: nothing). */
export function toSandboxSeen(
  r: SandboxRecord,
  activity: {
    seen: ActivitySnapshot | null;
    floorMs: number;
    expiryWarningMs?: number | undefined;
    nowMs?: number;
  } | null,
): Sandbox {
  return {
    id: r.id,
    template: r.template,
    templateId: r.templateId,
    state: r.state,
    conditions: r.conditions,
    env: r.env,
    cwd: r.cwd,
    hostname: r.hostname,
    resources: { cpuCount: r.cpuCount, memoryMiB: r.memoryMiB, diskMiB: r.diskMiB },
    labels: r.labels,
    timeoutMs: r.timeoutMs,
    ...lifecycleView(
      r,
      activity?.seen ?? null,
      activity?.floorMs ?? 0,
      activity?.expiryWarningMs ?? null,
      activity?.nowMs ?? null,
    ),
    desiredState: r.desiredState,
    autoResume: r.autoResume,
    keeps: { filesystem: true, memory: ['running', 'pausing', 'paused', 'resuming'].includes(r.state) },
    lineage: { parentId: r.parentId, snapshotId: r.snapshotId },
    quarantine: r.quarantine ?? null,
    network: networkView(r),
    ...(r.lifecycle?.policySources ? { policySources: r.lifecycle.policySources as Sandbox['policySources'] } : {}),
    createdAt: r.createdAt,
    updatedAt: r.updatedAt,
  };
}

/** Sandboxes: create, list, get (with a fresh look at the host), delete. Operations on one id are serialized. */
export class SandboxService {
  /** Pause, resume, stop, start, fork and snapshots of these sandboxes. */
  readonly persistence: PersistenceService;

  constructor(private readonly deps: SandboxServiceDeps) {
    this.persistence = new PersistenceService({ ...deps, service: this });
  }

  /**
   * Create a sandbox and return once it runs. A failure at any step removes every host resource and the row.
   * @throws ApiError `template_not_found`, `invalid_request` (resources over capacity), `runtime_error`
   */
  async create(caller: Principal, input: CreateSandboxInput): Promise<Sandbox> {
    const snapshot =
      input.fromSnapshot === undefined
        ? null
        : await this.persistence.requireSnapshot(caller.tenantId, input.fromSnapshot);
    const restoreMemory = snapshot !== null && input.restoreMemory !== false;
    if (snapshot !== null && restoreMemory && !snapshot.memory) {
      throw new ApiError(ErrorCode.invalidRequest, `snapshot ${input.fromSnapshot} holds files only, no memory`, {
        hint: 'pass restoreMemory: false (CLI: --fs-only) to boot on its files',
      });
    }
    const { template, ref } =
      snapshot === null
        ? await this.deps.templates
            .resolveReady(caller.tenantId, input.template)
            .then((r) => ({ template: { id: r.record.id, name: r.record.name }, ref: r.ref }))
        : {
            template: { id: snapshot.templateId, name: snapshot.template },
            ref: await this.deps.templates.refById(snapshot.templateId, snapshot.template),
          };
    const tenantSettings = (await this.deps.tenantDefaults?.settings(caller.tenantId)) ?? {};
    const { policies, sources, violation } = resolvePolicies(
      input,
      this.deps.policyDefaults ?? BUILTIN_POLICY_DEFAULTS,
      tenantSettings,
    );
    if (violation !== null) {
      throw new ApiError(
        ErrorCode.policyLimitExceeded,
        `maxAgeMs ${violation.requested ?? 'none'} is above this tenant's limit of ${violation.limitMs} ms`,
        { hint: `pass maxAgeMs at most ${violation.limitMs}, or leave it out to get the limit`, details: violation },
      );
    }
    const secretPlan = await this.planSecrets(caller, input);
    const resources: Resources =
      snapshot === null
        ? {
            cpuCount: input.cpuCount ?? DEFAULT_RESOURCES.cpuCount,
            memoryMiB: input.memoryMiB ?? DEFAULT_RESOURCES.memoryMiB,
            diskMiB: input.diskMiB ?? DEFAULT_RESOURCES.diskMiB,
          }
        : {
            cpuCount: input.cpuCount ?? snapshot.settings.cpuCount,
            // The image's kernel was sized for these: a restore keeps them.
            memoryMiB: restoreMemory ? snapshot.settings.memoryMiB : (input.memoryMiB ?? snapshot.settings.memoryMiB),
            diskMiB: snapshot.settings.diskMiB,
          };
    const wantsVolumes = (input.volumes?.length ?? 0) > 0;
    if (wantsVolumes && this.deps.volumes === undefined) {
      throw new ApiError(ErrorCode.unsupported, 'this server has no volumes', { hint: 'leave volumes out' });
    }
    if (snapshot === null && this.deps.pool !== undefined && secretPlan === null && !wantsVolumes) {
      // Fast path: a pool sandbox of the same template and resources, handed over by one conditional update.
      const claimed = await this.deps.pool.claim({
        tenantId: caller.tenantId,
        template: input.template,
        templateId: template.id,
        resources,
        env: input.env,
        labels: input.labels,
        cwd: input.cwd,
        timeoutMs: policies.timeoutMs,
        autoResume: input.autoResume ?? true,
      });
      if (claimed !== null) return this.adoptClaimed(caller, claimed, input, policies, sources);
    }
    await this.checkCapacity(resources);
    const id = newId('sbx');
    const logger = this.deps.logger.child({ sandboxId: id, tenantId: caller.tenantId });
    return this.deps.mutex.run(id, async () => {
      const now = isoNow(this.deps.clock);
      const record: SandboxRecord = {
        id,
        tenantId: caller.tenantId,
        template: snapshot === null ? input.template : snapshot.template,
        templateId: template.id,
        state: 'creating',
        conditions: [],
        env: {
          ...(snapshot === null ? input.env : { ...snapshot.settings.env, ...input.env }),
          ...secretPlan?.env,
        },
        labels: input.labels,
        cwd: input.cwd,
        hostname: id.replace('_', '-'),
        cpuCount: resources.cpuCount,
        memoryMiB: resources.memoryMiB,
        diskMiB: resources.diskMiB,
        timeoutMs: policies.timeoutMs,
        expiresAt: expiresAtFor(this.deps.clock.nowMs(), policies.timeoutMs),
        createdAt: now,
        updatedAt: now,
        version: 1,
        desiredState: 'running',
        autoResume: input.autoResume ?? true,
        parentId: null,
        snapshotId: snapshot?.id ?? null,
        network: resolveNetworkPolicy(input.network, this.deps.network?.defaultMode ?? 'none'),
        lifecycle: {
          ...DEFAULT_LIFECYCLE,
          timeoutAction: policies.timeoutAction,
          idleTimeoutMs: policies.idleTimeoutMs,
          maxAgeMs: policies.maxAgeMs,
          pausedRetentionMs: policies.pausedRetentionMs,
          snapshotKeepLast: policies.snapshotKeepLast,
          policySources: sources,
        },
      };
      const mounts = (await this.deps.volumes?.resolveMounts(caller.tenantId, id, input.volumes ?? [])) ?? [];
      await this.deps.sandboxes.insert(record, { also: this.deps.volumes?.insertMounts(mounts) });
      if (mounts.length > 0) crashPoint('create:after-volume-mount-rows');
      const startedMs = this.deps.clock.nowMs();
      try {
        if (secretPlan !== null) await this.deps.secrets?.bind(caller.tenantId, id, secretPlan.bindings);
        const options = {
          sandboxId: id,
          template: ref,
          resources,
          hostname: record.hostname,
          network: record.network ?? undefined,
          volumes: this.deps.volumes?.binds(mounts),
        };
        if (snapshot === null) await this.deps.driver.create(options);
        else {
          const sourceDir = await this.deps.blobs.open(snapshot.id);
          await this.deps.driver.createFromSnapshot({ ...options, sourceDir, memory: restoreMemory });
        }
        if (secretPlan !== null) await this.deps.installSecretTrust?.(id);
        const running = await this.deps.sandboxes.update(
          caller.tenantId,
          id,
          record.version,
          { state: 'running' },
          isoNow(this.deps.clock),
        );
        if (running === null) throw new Error('the sandbox row changed during create');
        logger.info(
          { template: input.template, durationMs: this.deps.clock.nowMs() - startedMs, resources },
          'sandbox created',
        );
        this.deps.metrics?.createFinished(id, true, startedMs, this.deps.clock.nowMs());
        return mounts.length === 0
          ? this.view(running)
          : { ...this.view(running), volumes: await this.deps.volumes?.mountsView(id) };
      } catch (error) {
        logger.warn({ err: error }, 'sandbox create failed; removing what it left');
        this.deps.metrics?.createFinished(id, false, startedMs, this.deps.clock.nowMs());
        await this.deps.driver
          .delete(id)
          .catch((e: unknown) =>
            logger.error({ err: e }, 'cleanup after failed create failed; the reconciler retries'),
          );
        await this.deps.sandboxes.remove(caller.tenantId, id);
        if (error instanceof ApiError) throw error;
        if (snapshot !== null) throw runtimeFailure(`creating from snapshot ${input.fromSnapshot} failed`, error);
        throw new ApiError(
          ErrorCode.runtimeError,
          `the runtime could not start the sandbox: ${(error as Error).message}`,
          {
            hint: 'retry; if it keeps failing, the server log has the runtime output under this request id',
            cause: error,
          },
        );
      }
    });
  }

  /** The placeholders and env of a create's `secrets`, or null without any. */
  private async planSecrets(caller: Principal, input: CreateSandboxInput): Promise<SandboxSecretsPlan | null> {
    if (input.secrets === undefined || input.secrets.length === 0) return null;
    if (this.deps.secrets === undefined) {
      throw new ApiError(ErrorCode.unsupported, 'this server does not substitute secrets at egress', {
        hint: 'secrets need the sandbox network (BURROW_NETWORK on, the gvisor runtime); create without secrets',
      });
    }
    return this.deps.secrets.plan(caller.tenantId, input.secrets);
  }

  /** @throws ApiError `invalid_request` when the cursor is not one this server made */
  async list(caller: Principal, query: ListSandboxesInput): Promise<SandboxList> {
    const after = query.cursor === undefined ? null : decodeCursor(query.cursor);
    if (query.cursor !== undefined && after === null) {
      throw new ApiError(ErrorCode.invalidRequest, 'the cursor is not valid', {
        hint: 'pass the nextCursor of the previous page unchanged, or leave it out to start over',
      });
    }
    const labels = query.label.map((l): [string, string] => {
      const at = l.indexOf('=');
      return [l.slice(0, at), l.slice(at + 1)];
    });
    const rows = await this.deps.sandboxes.list(caller.tenantId, {
      state: query.state,
      parentId: query.parentId,
      labels,
      limit: query.limit + 1,
      after,
    });
    const page = rows.slice(0, query.limit);
    const last = page.at(-1);
    const nextCursor =
      rows.length > query.limit && last ? encodeCursor({ createdAt: last.createdAt, id: last.id }) : null;
    return { items: page.map((r) => toSandboxSeen(r, this.activityOf(r.id))), nextCursor };
  }

  /**
   * The sandbox, after recording what the host reports (OOM kills, runtime exits, a vanished container).
   * @throws ApiError `sandbox_not_found` (also for another tenant's id)
   */
  async get(caller: Principal, id: string): Promise<Sandbox> {
    return this.deps.mutex.run(id, async () => {
      const record = await this.require(caller.tenantId, id);
      const view = toSandboxSeen(await this.refresh(record), this.activityOf(id));
      const usage = await this.deps.driver.networkUsage?.(id).catch(() => null);
      const volumes = await this.deps.volumes?.mountsView(id);
      const withVolumes = volumes === undefined || volumes.length === 0 ? view : { ...view, volumes };
      return usage === null || usage === undefined
        ? withVolumes
        : { ...withVolumes, network: networkView(record, usage) };
    });
  }

  /**
   * The row `id` of `tenantId`.
   * @throws ApiError `sandbox_not_found`
   */
  async require(tenantId: string, id: string): Promise<SandboxRecord> {
    const record = await this.deps.sandboxes.get(tenantId, id);
    if (record === null || record.state === 'deleted') throw sandboxNotFound(id);
    return record;
  }

  /**
   * The row `id` of `tenantId`, resumed first when it is paused and allows auto-resume. Call under the id's lock.
   * @throws ApiError `sandbox_not_found`, `sandbox_paused` (auto-resume off), `checkpoint_rejected`, `runtime_error`
   */
  async requireRunning(tenantId: string, id: string): Promise<SandboxRecord> {
    const record = await this.require(tenantId, id);
    if (record.state !== 'paused') return record;
    if (!record.autoResume) {
      throw new ApiError(ErrorCode.sandboxPaused, `sandbox ${id} is paused`, {
        hint: 'resume it first (`burrow resume ID`, POST /v1/sandboxes/{id}/resume); it was created with autoResume: false',
      });
    }
    return this.persistence.resumeUnderLock(record);
  }

  /**
   * Record activity on sandbox `id` now if `tenantId` owns it (the HTTP activity hook's one call; see
   * `countsAsActivity` for which calls count).
   * @returns whether it was recorded (false: no such sandbox for this tenant, or no tracker)
   */
  async touch(tenantId: string, id: string): Promise<boolean> {
    const activity = this.deps.activity;
    if (activity === undefined) return false;
    const record = await this.deps.sandboxes.get(tenantId, id);
    if (record === null || record.state === 'deleted') return false;
    activity.touch(id);
    return true;
  }

  /**
   * The labels of sandbox `id` of `tenantId`, read without its lock (a scoped key's label restriction is checked on
   * every request).
   * @returns the labels, or null when the tenant has no such sandbox
   */
  async labelsOf(tenantId: string, id: string): Promise<Record<string, string> | null> {
    const record = await this.deps.sandboxes.get(tenantId, id);
    return record === null || record.state === 'deleted' ? null : record.labels;
  }

  /** Observe a running sandbox on the host and record events and a vanished or exited container. Call under the id's lock. */
  async refresh(record: SandboxRecord): Promise<SandboxRecord> {
    if (record.state !== 'running') return record;
    const observed = await this.deps.driver.observe(record.id);
    const at = isoNow(this.deps.clock);
    const added: Condition[] = observed.events.map((e) => ({
      type: e.type,
      status: 'true',
      reason: e.reason,
      message: e.message,
      at,
    }));
    let state: SandboxState = record.state;
    if (observed.status !== 'running') {
      state = 'error';
      if (observed.status !== 'missing') {
        // The runtime ended (its sentry was killed, its init exited): release what it still holds on the host
        // (processes left in its cgroups, the runsc record, mounts, loop device, cgroups) before the row says
        // error; the disk is kept, so a start boots it again with its files.
        await this.deps.driver
          .stop(record.id)
          .catch((error: unknown) =>
            this.deps.logger.warn({ err: error, sandboxId: record.id }, 'releasing an exited sandbox failed'),
          );
      }
      added.push({
        type: 'Ready',
        status: 'false',
        reason: observed.status === 'missing' ? 'ContainerMissing' : 'RuntimeExited',
        message:
          observed.status === 'missing'
            ? 'the container is gone from the host; delete the sandbox and create a new one'
            : 'the sandbox runtime ended; its disk is kept: start it again (POST /v1/sandboxes/{id}/start) or delete it',
        at,
      });
    }
    if (added.length === 0) return record;
    this.deps.logger.child({ sandboxId: record.id }).warn({ conditions: added, state }, 'sandbox observed change');
    const updated = await this.deps.sandboxes.update(
      record.tenantId,
      record.id,
      record.version,
      { state, conditions: withConditions(record.conditions, added) },
      at,
    );
    return updated ?? record;
  }

  /**
   * Delete the sandbox and verify that nothing of it is left on the host.
   * @throws ApiError `sandbox_not_found`, `runtime_error` (the row stays `deleting`; the reconciler retries)
   */
  async remove(caller: Principal, id: string): Promise<void> {
    await this.deps.mutex.run(id, async () => {
      const record = await this.require(caller.tenantId, id);
      await this.deleteUnderLock(record);
    });
  }

  /**
   * Write `deleting`, delete host resources, remove the row. Call under the id's lock.
   * @param options.also work committed with the `deleting` row (the policy's `expired` event); skipped when the
   *   row is already `deleting`
   * @throws ApiError `runtime_error`
   */
  async deleteUnderLock(record: SandboxRecord, options: WithInTransaction = {}): Promise<void> {
    const logger = this.deps.logger.child({ sandboxId: record.id, tenantId: record.tenantId });
    if (record.state !== 'deleting') {
      const updated = await this.deps.sandboxes.update(
        record.tenantId,
        record.id,
        record.version,
        { state: 'deleting' },
        isoNow(this.deps.clock),
        options,
      );
      if (updated === null)
        throw new ApiError(ErrorCode.conflict, `sandbox ${record.id} changed meanwhile`, { hint: 'retry the delete' });
    }
    const deleteStartedMs = this.deps.clock.nowMs();
    // Cleanup lag runs from the delete request: a retried row has been `deleting` since its last update.
    const requestedMs = record.state === 'deleting' ? Date.parse(record.updatedAt) : deleteStartedMs;
    try {
      await this.deps.driver.delete(record.id);
    } catch (error) {
      logger.error({ err: error }, 'sandbox delete failed; the reconciler retries');
      throw new ApiError(ErrorCode.runtimeError, `deleting sandbox ${record.id} failed: ${(error as Error).message}`, {
        hint: 'the server retries in the background; delete again later to check',
        cause: error,
      });
    }
    for (const snapshot of await this.deps.snapshots.unnamedOf(record.id)) {
      await this.deps.blobs.delete(snapshot.id);
      await this.deps.snapshots.remove(snapshot.id);
    }
    await this.deps.sandboxes.remove(record.tenantId, record.id);
    this.deps.metrics?.observeOperation('delete', this.deps.clock.nowMs() - deleteStartedMs);
    this.deps.metrics?.deleteVerified(record.id, requestedMs, this.deps.clock.nowMs());
    logger.info('sandbox deleted');
  }

  /** Give a sandbox claimed from the warm pool the create request's policies, and record its `created` event. */
  private async adoptClaimed(
    caller: Principal,
    claimed: SandboxRecord,
    input: CreateSandboxInput,
    policies: PolicyDefaults,
    sources: Record<string, string>,
  ): Promise<Sandbox> {
    const lifecycle = {
      timeoutAction: policies.timeoutAction,
      idleTimeoutMs: policies.idleTimeoutMs,
      maxAgeMs: policies.maxAgeMs,
      pausedRetentionMs: policies.pausedRetentionMs,
      snapshotKeepLast: policies.snapshotKeepLast,
      policySources: sources,
    } as const;
    // The `created` event commits with the adoption (a crash keeps both or neither).
    const created = {
      tenantId: caller.tenantId,
      type: 'created',
      sandboxId: claimed.id,
      message: `sandbox ${claimed.id} created (from the warm pool)`,
      data: { template: claimed.template, snapshotId: null, warmPool: true },
    } as const;
    // A pool sandbox waits with no network; the request's policy (or the default) applies from here.
    const network = resolveNetworkPolicy(input.network, this.deps.network?.defaultMode ?? 'none');
    if (this.deps.driver.capabilities.has('network')) await this.deps.driver.updateNetwork?.(claimed.id, network);
    const updated = await this.deps.sandboxes.update(
      caller.tenantId,
      claimed.id,
      claimed.version,
      { lifecycle, network },
      isoNow(this.deps.clock),
      { also: this.deps.events?.inTransaction(created) },
    );
    if (updated === null) this.deps.events?.recordLater(created);
    return toSandboxSeen(updated ?? claimed, this.activityOf(claimed.id));
  }

  /** What the activity tracker knows of `id`, for the API view's idle deadline (null: not tracked). */
  activityOf(
    id: string,
  ): { seen: ActivitySnapshot | null; floorMs: number; expiryWarningMs?: number | undefined; nowMs?: number } | null {
    const activity = this.deps.activity;
    return activity === undefined
      ? null
      : {
          seen: activity.snapshot(id),
          floorMs: activity.startedAtMs,
          expiryWarningMs: this.deps.expiryWarningMs,
          nowMs: this.deps.clock.nowMs(),
        };
  }

  /**
   * The API view of `r` with its deadlines as the policies will carry them out (idle deadline from the activity
   * tracker; a deletion not before its warning).
   */
  view(r: SandboxRecord): Sandbox {
    return toSandboxSeen(r, this.activityOf(r.id));
  }

  private async checkCapacity(resources: Resources): Promise<void> {
    const { capacity } = this.deps;
    const over = (what: string, asked: number, max: number, unit: string) =>
      new ApiError(ErrorCode.invalidRequest, `${what} ${asked}${unit} is more than this host has (${max}${unit})`, {
        hint: `ask for at most ${max}${unit}`,
        details: { field: what, requested: asked, max },
      });
    if (resources.cpuCount > capacity.cpuCount()) throw over('cpuCount', resources.cpuCount, capacity.cpuCount(), '');
    if (resources.memoryMiB > capacity.memoryMiB())
      throw over('memoryMiB', resources.memoryMiB, capacity.memoryMiB(), ' MiB');
    const freeDisk = await capacity.freeDiskMiB();
    if (resources.diskMiB > freeDisk) throw over('diskMiB', resources.diskMiB, freeDisk, ' MiB');
  }
}
