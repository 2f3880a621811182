import type {
  Condition,
  InspectSandboxQuerySchema,
  ResetSandboxRequestSchema,
  Resources,
  Sandbox,
  SandboxInspection,
  SandboxState,
} from '@burrow/contract';
import { ErrorCode } from '@burrow/contract';
import { crashPoint, type RuntimeDriver } from '@burrow/runtime';
import type { Logger } from 'pino';
import type { z } from 'zod';
import { isQuarantined } from '../lifecycle/quarantine.js';
import { type SandboxRecord, type SandboxStore, withConditions } from '../store/sandbox-store.js';
import type { SnapshotRecord } from '../store/snapshot-store.js';
import { ApiError, sandboxNotFound } from '../util/api-error.js';
import { type Clock, isoNow } from '../util/clock.js';
import type { KeyedMutex } from '../util/keyed-mutex.js';
import type { BlobStore } from './blob-store.js';
import type { Principal } from './key-service.js';
import type { Metrics } from './metrics.js';
import { RESET_IN_PROGRESS, runtimeFailure } from './persistence-service.js';
import type { SandboxService } from './sandbox-service.js';
import type { TemplateService } from './template-service.js';

/** A reset request after contract defaults. */
export type ResetInput = z.output<typeof ResetSandboxRequestSchema>;
/** An inspect query after contract defaults. */
export type InspectInput = z.output<typeof InspectSandboxQuerySchema>;

/** Most directories an inspection lists. */
const MAX_INSPECT_DIRECTORIES = 50;

/** Dependencies of {@link HygieneService}. */
export interface HygieneServiceDeps {
  sandboxes: SandboxStore;
  service: SandboxService;
  templates: TemplateService;
  blobs: BlobStore;
  driver: RuntimeDriver;
  mutex: KeyedMutex;
  clock: Clock;
  logger: Logger;
  metrics?: Metrics | undefined;
}

/**
 * Reset (to the template or a snapshot, keeping the id), quarantine and release, and inspection of retained
 * state. Every operation runs under the sandbox's lock.
 */
export class HygieneService {
  constructor(private readonly deps: HygieneServiceDeps) {}

  /**
   * Refuse `action` on a quarantined sandbox unless the caller is an admin. A missing sandbox passes (the route
   * itself answers `sandbox_not_found`).
   * @throws ApiError `sandbox_quarantined`
   */
  async guard(caller: Principal, id: string, action: string): Promise<void> {
    if (caller.role === 'admin') return;
    const record = await this.deps.sandboxes.get(caller.tenantId, id);
    if (record === null || !isQuarantined(record)) return;
    throw quarantined(record, action);
  }

  /**
   * Set the sandbox aside: exec, writes, commands, fork, reset and delete need an admin key until released, and
   * policies leave it alone. Quarantining again keeps the first record.
   * @throws ApiError `sandbox_not_found`
   */
  async quarantine(caller: Principal, id: string, input: { reason: string }): Promise<Sandbox> {
    return this.deps.mutex.run(id, async () => {
      const record = await this.deps.service.require(caller.tenantId, id);
      if (isQuarantined(record)) return this.deps.service.view(record);
      const at = isoNow(this.deps.clock);
      const updated = await this.write(record, {
        patch: { quarantine: { at, reason: input.reason, by: caller.keyId } },
        condition: { type: 'Quarantined', status: 'true', reason: 'Quarantined', message: input.reason, at },
      });
      this.deps.logger.warn({ sandboxId: id, by: caller.keyId, reason: input.reason }, 'sandbox quarantined');
      return this.deps.service.view(updated);
    });
  }

  /**
   * Lift a quarantine. Admin only; an admin key releases a sandbox of any tenant (a member key of another tenant
   * can quarantine but neither release nor delete, so the sandbox would otherwise be stuck, counting against that
   * tenant's quota, until someone minted an admin key for that tenant).
   * @throws ApiError `forbidden`, `sandbox_not_found`
   */
  async release(caller: Principal, id: string): Promise<Sandbox> {
    if (caller.role !== 'admin') {
      throw new ApiError(ErrorCode.forbidden, 'releasing a quarantined sandbox needs an admin key', {
        hint: 'ask an admin to review and release it (`burrow quarantine ID --release`)',
      });
    }
    return this.deps.mutex.run(id, async () => {
      const record = await this.deps.sandboxes.getAcrossTenants(id);
      if (record === null || record.state === 'deleted') throw sandboxNotFound(id);
      if (!isQuarantined(record)) return this.deps.service.view(record);
      const at = isoNow(this.deps.clock);
      const updated = await this.write(record, {
        patch: { quarantine: null },
        condition: {
          type: 'Quarantined',
          status: 'false',
          reason: 'Released',
          message: `released by ${caller.keyId}`,
          at,
        },
      });
      this.deps.logger.info({ sandboxId: id, by: caller.keyId }, 'sandbox released from quarantine');
      return this.deps.service.view(updated);
    });
  }

  /**
   * Reset the sandbox under the same id, hostname, labels and policies: to a fresh disk and boot of its template,
   * or to a snapshot (memory restored unless `memory: false`). Everything else on its disk is discarded.
   * On failure the sandbox is `error` with a `ResetFailed` condition (reset again or delete it).
   * @throws ApiError `sandbox_not_found`, `sandbox_quarantined`, `sandbox_not_running` (mid-transition),
   *   `snapshot_not_found`, `invalid_request` (memory asked of a files-only snapshot), `checkpoint_rejected`,
   *   `runtime_error`
   */
  async reset(caller: Principal, id: string, input: ResetInput): Promise<Sandbox> {
    return this.deps.mutex.run(id, async () => {
      const record = await this.deps.service.require(caller.tenantId, id);
      if (isQuarantined(record) && caller.role !== 'admin') throw quarantined(record, 'reset');
      const allowed: SandboxState[] = ['running', 'paused', 'stopped', 'error'];
      if (!allowed.includes(record.state)) {
        throw new ApiError(ErrorCode.sandboxNotRunning, `cannot reset sandbox ${id}: it is ${record.state}`, {
          hint: 'wait until the current operation finishes, then reset',
          details: { state: record.state },
        });
      }
      const snapshot =
        input.to === 'snapshot'
          ? await this.deps.service.persistence.requireSnapshot(caller.tenantId, input.snapshot)
          : null;
      const memory = input.to === 'snapshot' && input.memory;
      if (snapshot !== null && memory && !snapshot.memory) {
        throw new ApiError(
          ErrorCode.invalidRequest,
          `snapshot ${input.to === 'snapshot' ? input.snapshot : ''} holds files only, no memory`,
          {
            hint: 'pass memory: false (CLI: --fs-only) to boot fresh on its files',
          },
        );
      }
      const target = this.target(record, snapshot, memory);
      const template = await this.deps.templates.refById(target.templateId, target.template);
      const startedMs = this.deps.clock.nowMs();
      const what = snapshot === null ? `its template ${record.template}` : `snapshot ${snapshot.name ?? snapshot.id}`;
      // The row records the target and a `Reset` condition with status false before the old disk is deleted: a
      // crash after that point is finished as this reset by the reconciler (see `finishInterrupted`).
      const targetFields = {
        template: target.template,
        templateId: target.templateId,
        ...target.resources,
        snapshotId: snapshot?.id ?? null,
      };
      const resetting = await this.write(record, {
        patch: {
          state: 'resuming',
          desiredState: 'running',
          ...targetFields,
        },
        condition: this.condition(
          'Reset',
          'false',
          snapshot === null
            ? RESET_IN_PROGRESS.template
            : memory
              ? RESET_IN_PROGRESS.snapshot
              : RESET_IN_PROGRESS.snapshotFiles,
          `resetting to ${what}`,
        ),
      });
      try {
        await this.deps.driver.delete(id);
        crashPoint('reset:after-delete');
        const options = {
          sandboxId: id,
          template,
          resources: target.resources,
          hostname: record.hostname,
          network: record.network ?? undefined,
        };
        if (snapshot === null) await this.deps.driver.create(options);
        else {
          const sourceDir = await this.deps.blobs.open(snapshot.id);
          await this.deps.driver.createFromSnapshot({ ...options, sourceDir, memory });
        }
      } catch (error) {
        const failure = runtimeFailure(`resetting sandbox ${id} to ${what} failed`, error);
        const observed = await this.deps.driver.observe(id).catch(() => null);
        await this.write(resetting, {
          patch: { state: observed?.status === 'running' ? 'running' : 'error' },
          condition: this.condition(
            'Ready',
            'false',
            'ResetFailed',
            `${failure.message}; reset again or delete the sandbox`,
          ),
        }).catch(() => undefined);
        throw failure;
      }
      crashPoint('reset:after-runtime');
      const updated = await this.write(resetting, {
        patch: {
          state: 'running',
          ...targetFields,
        },
        condition: this.condition(
          'Reset',
          'true',
          snapshot === null ? 'ResetToTemplate' : memory ? 'ResetToSnapshot' : 'ResetToSnapshotFiles',
          `reset to ${what}; everything written since was discarded`,
        ),
      });
      this.deps.metrics?.observeOperation('reset', this.deps.clock.nowMs() - startedMs);
      this.deps.logger.info(
        { sandboxId: id, to: input.to, durationMs: this.deps.clock.nowMs() - startedMs },
        'sandbox reset',
      );
      return this.deps.service.view(updated);
    });
  }

  /**
   * Disk used by directory and files changed since the template, read without changing the sandbox (a paused or
   * stopped disk is mounted read-only for the look).
   * @throws ApiError `sandbox_not_found`, `sandbox_not_running` (no disk to read now), `unsupported`, `runtime_error`
   */
  async inspect(caller: Principal, id: string, query: InspectInput): Promise<SandboxInspection> {
    return this.deps.mutex.run(id, async () => {
      const record = await this.deps.service.require(caller.tenantId, id);
      const { driver } = this.deps;
      if (driver.inspectDisk === undefined) {
        throw new ApiError(ErrorCode.unsupported, `the ${driver.name} runtime cannot inspect sandbox disks`, {
          hint: 'read files with GET /v1/sandboxes/{id}/files instead',
        });
      }
      if (!['running', 'paused', 'stopped', 'error'].includes(record.state)) {
        throw new ApiError(ErrorCode.sandboxNotRunning, `cannot inspect sandbox ${id}: it is ${record.state}`, {
          hint: 'wait until the current operation finishes, then inspect',
          details: { state: record.state },
        });
      }
      const template = await this.deps.templates.refById(record.templateId, record.template);
      try {
        const found = await driver.inspectDisk(id, {
          template,
          maxChanges: query.limit,
          maxDepth: query.depth,
          maxDirectories: MAX_INSPECT_DIRECTORIES,
        });
        return {
          sandboxId: id,
          state: record.state,
          disk: { usedBytes: found.usedBytes, limitBytes: found.limitBytes, directories: found.directories },
          changes: { items: found.changes, counts: found.counts, truncated: found.truncated },
          inspectedAt: isoNow(this.deps.clock),
        };
      } catch (error) {
        throw runtimeFailure(`inspecting sandbox ${id} failed`, error);
      }
    });
  }

  /** Template and resources after a reset: the sandbox's own, or the snapshot's (memory fixes the RAM size). */
  private target(
    record: SandboxRecord,
    snapshot: SnapshotRecord | null,
    memory: boolean,
  ): { template: string; templateId: string; resources: Resources } {
    if (snapshot === null) {
      return {
        template: record.template,
        templateId: record.templateId,
        resources: { cpuCount: record.cpuCount, memoryMiB: record.memoryMiB, diskMiB: record.diskMiB },
      };
    }
    return {
      template: snapshot.template,
      templateId: snapshot.templateId,
      resources: {
        cpuCount: record.cpuCount,
        memoryMiB: memory ? snapshot.settings.memoryMiB : record.memoryMiB,
        diskMiB: snapshot.settings.diskMiB,
      },
    };
  }

  private condition(type: string, status: 'true' | 'false', reason: string, message: string): Condition {
    return { type, status, reason, message, at: isoNow(this.deps.clock) };
  }

  private async write(
    record: SandboxRecord,
    change: { patch: Parameters<SandboxStore['update']>[3]; condition?: Condition },
  ): Promise<SandboxRecord> {
    const conditions =
      change.condition === undefined ? {} : { conditions: withConditions(record.conditions, [change.condition]) };
    const updated = await this.deps.sandboxes.update(
      record.tenantId,
      record.id,
      record.version,
      { ...change.patch, ...conditions },
      isoNow(this.deps.clock),
    );
    if (updated === null) {
      throw new ApiError(ErrorCode.conflict, `sandbox ${record.id} changed meanwhile`, { hint: 'retry' });
    }
    return updated;
  }
}

function quarantined(record: SandboxRecord, action: string): ApiError {
  return new ApiError(
    ErrorCode.sandboxQuarantined,
    `sandbox ${record.id} is quarantined: ${action} needs an admin key`,
    {
      hint: 'read, inspect, pause, stop and snapshot still work; an admin can release it (`burrow quarantine ID --release`)',
      details: { quarantine: record.quarantine ?? null, action },
    },
  );
}
