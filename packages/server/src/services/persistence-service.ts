import type {
  Condition,
  ForkSandboxResponse,
  ForkVolumes,
  Resources,
  Sandbox,
  SandboxState,
  Snapshot,
  SnapshotList,
} from '@burrow/contract';
import { ErrorCode } from '@burrow/contract';
import {
  CheckpointBlockedError,
  type CheckpointBlockReason,
  type CheckpointInfo,
  CheckpointRejectedError,
  type CreateOptions,
  crashPoint,
  type RuntimeDriver,
  UnsupportedError,
} from '@burrow/runtime';
import type { Logger } from 'pino';
import { expiresAtFor } from '../lifecycle/ttl-policy.js';
import { type SandboxPatch, type SandboxRecord, type SandboxStore, withConditions } from '../store/sandbox-store.js';
import type { SnapshotRecord, SnapshotStore } from '../store/snapshot-store.js';
import { ApiError } from '../util/api-error.js';
import { type Clock, isoNow } from '../util/clock.js';
import { newId } from '../util/ids.js';
import type { KeyedMutex } from '../util/keyed-mutex.js';
import type { BlobStore } from './blob-store.js';
import type { EventService } from './event-service.js';
import type { Principal } from './key-service.js';
import type { Metrics } from './metrics.js';
import { SnapshotStoreError } from './s3-errors.js';
import type { SecretService } from './secret-service.js';
import type { TemplateService } from './template-service.js';
import type { VolumeService } from './volume-service.js';

/** What the persistence verbs need of the sandbox service: read a row the caller may see, and show it. */
export interface SandboxLookup {
  /** @throws ApiError `sandbox_not_found` when the tenant has no such sandbox */
  require(tenantId: string, id: string): Promise<SandboxRecord>;
  view(record: SandboxRecord): Sandbox;
}

/** Dependencies of {@link PersistenceService}. */
export interface PersistenceDeps {
  sandboxes: SandboxStore;
  snapshots: SnapshotStore;
  blobs: BlobStore;
  templates: TemplateService;
  /** Reads a caller's sandbox and shapes it for the API (the sandbox service). */
  service: SandboxLookup;
  driver: RuntimeDriver;
  mutex: KeyedMutex;
  clock: Clock;
  logger: Logger;
  metrics?: Metrics | undefined;
  /** Records `snapshot_created` / `snapshot_deleted` in the transaction of the row change they report. */
  events?: EventService | undefined;
  /** Gives fork children their parent's secret placeholders (absent: no secrets). */
  secrets?: Pick<SecretService, 'copyBindings'> | undefined;
  /** The sandboxes' volume mounts (absent: none). */
  volumes?: VolumeService | undefined;
}

/** A snapshot row as the API shows it, with its upload state in a remote store (null for a local one). */
export function toSnapshot(r: SnapshotRecord, upload: Snapshot['upload'] = null): Snapshot {
  // Once retention announced the deletion (its warning event), the time it will be carried out.
  const times = [r.expiresAt, r.retentionDeleteAt].filter((t): t is string => typeof t === 'string');
  const deletionAt = times.length === 0 ? null : times.reduce((a, b) => (Date.parse(a) >= Date.parse(b) ? a : b));
  return {
    id: r.id,
    name: r.name,
    sandboxId: r.sandboxId,
    template: r.template,
    templateId: r.templateId,
    memory: r.memory,
    imageSizeBytes: r.imageSizeBytes,
    diskSizeBytes: r.diskSizeBytes,
    runtimeVersion: r.runtimeVersion,
    createdAt: r.createdAt,
    expiresAt: deletionAt,
    expiry: deletionAt === null ? null : { at: deletionAt, action: 'delete', reason: 'snapshot-retention' },
    upload,
  };
}

/** What to do about a checkpoint the sandbox's own state blocks, by reason. */
const CHECKPOINT_BLOCKED_HINTS: Record<CheckpointBlockReason, string> = {
  deleted_file_open:
    'a process named in details.blockers keeps a deleted file open or works in a deleted directory outside /tmp; ' +
    'let it close the file or leave the directory (or end it), or keep temporary files in /tmp (TMPDIR=/tmp), ' +
    'then retry; the sandbox keeps running meanwhile',
  host_socket_open:
    'a process named in details.blockers (or, when none is named, some process in the sandbox) holds a host ' +
    'socket: a connection to the exec agent socket, or the output of a command that ran outside the exec agent; ' +
    'end that process or connection (start long-running processes as background commands, or with their output ' +
    'redirected: cmd >/dev/null 2>&1 &), then retry; the sandbox keeps running meanwhile',
};

/** Turn a driver failure into an API error with a stable code. */
export function runtimeFailure(what: string, error: unknown): ApiError {
  if (error instanceof ApiError) return error;
  if (error instanceof SnapshotStoreError) {
    return new ApiError(error.code, `${what}: ${error.message}`, { hint: error.hint, cause: error });
  }
  if (error instanceof CheckpointRejectedError) {
    return new ApiError(ErrorCode.checkpointRejected, `${what}: ${error.message}`, {
      hint:
        'the saved state is damaged, from another runtime version or encrypted with another image key; it was not ' +
        'restored and is kept as it is',
      cause: error,
    });
  }
  if (error instanceof CheckpointBlockedError) {
    const code = error.reason === 'deleted_file_open' ? ErrorCode.deletedFileOpen : ErrorCode.hostSocketOpen;
    return new ApiError(code, `${what}: ${error.message}`, {
      hint: CHECKPOINT_BLOCKED_HINTS[error.reason],
      details: { blockers: error.blockers },
      cause: error,
    });
  }
  if (error instanceof UnsupportedError) {
    return new ApiError(ErrorCode.unsupported, `${what}: ${error.message}`, {
      hint: 'this server runtime cannot do this; stop/start keeps the files',
      cause: error,
    });
  }
  return new ApiError(ErrorCode.runtimeError, `${what}: ${(error as Error).message}`, {
    hint: 'retry; if it keeps failing, the server log has the runtime output under this request id',
    cause: error,
  });
}

/** Reasons of the `Reset` condition (status false) a reset writes with its `resuming` row, by target. */
export const RESET_IN_PROGRESS = {
  template: 'ResettingToTemplate',
  snapshot: 'ResettingToSnapshot',
  snapshotFiles: 'ResettingToSnapshotFiles',
} as const;

/** The reset a `resuming` row is in the middle of (its last condition), or null. */
export function resetInProgress(record: SandboxRecord): string | null {
  const last = record.conditions.at(-1);
  if (last?.type !== 'Reset' || last.status !== 'false') return null;
  return (Object.values(RESET_IN_PROGRESS) as string[]).includes(last.reason) ? last.reason : null;
}

/**
 * Pause, resume, stop, start, fork and snapshots. Every transition writes the row before the runtime step
 * (`pausing`, `resuming`, `stopping` with the desired state) and after it, under the sandbox's lock, so a crash
 * leaves a row the reconciler finishes ({@link finishInterrupted}).
 */
export class PersistenceService {
  constructor(private readonly deps: PersistenceDeps) {}

  /** @throws ApiError `sandbox_not_found`, `sandbox_not_running`, `runtime_error` (the sandbox keeps running) */
  async pause(caller: Principal, id: string): Promise<Sandbox> {
    return this.deps.mutex.run(id, async () => {
      const record = await this.deps.service.require(caller.tenantId, id);
      if (record.state === 'paused') return this.deps.service.view(record);
      this.expectState(record, ['running'], 'pause');
      return this.deps.service.view(await this.pauseUnderLock(record));
    });
  }

  /** @throws ApiError `sandbox_not_found`, `sandbox_not_running`, `checkpoint_rejected` (stays paused), `runtime_error` */
  async resume(caller: Principal, id: string): Promise<Sandbox> {
    return this.deps.mutex.run(id, async () => {
      const record = await this.deps.service.require(caller.tenantId, id);
      if (record.state === 'running') return this.deps.service.view(record);
      this.expectState(record, ['paused'], 'resume');
      return this.deps.service.view(await this.resumeUnderLock(record));
    });
  }

  /** End every process and keep the disk. @throws ApiError `sandbox_not_found`, `sandbox_not_running`, `runtime_error` */
  async stop(caller: Principal, id: string): Promise<Sandbox> {
    return this.deps.mutex.run(id, async () => {
      const record = await this.deps.service.require(caller.tenantId, id);
      if (record.state === 'stopped') return this.deps.service.view(record);
      this.expectState(record, ['running', 'paused', 'error'], 'stop');
      const stopping = await this.write(record, { state: 'stopping', desiredState: 'stopped' });
      try {
        await this.deps.driver.stop(id);
      } catch (error) {
        throw runtimeFailure(`stopping sandbox ${id} failed`, error);
      }
      return this.deps.service.view(
        await this.write(
          stopping,
          { state: 'stopped' },
          this.condition('Stopped', 'UserStopped', 'processes ended; the disk is kept'),
        ),
      );
    });
  }

  /** Boot a stopped sandbox (or one in error, whose runtime ended) fresh on its disk. @throws ApiError `sandbox_not_found`, `sandbox_not_running`, `runtime_error` */
  async start(caller: Principal, id: string): Promise<Sandbox> {
    return this.deps.mutex.run(id, async () => {
      const record = await this.deps.service.require(caller.tenantId, id);
      if (record.state === 'running') return this.deps.service.view(record);
      if (record.state === 'paused') return this.deps.service.view(await this.resumeUnderLock(record));
      this.expectState(record, ['stopped', 'error'], 'start');
      // An error row's runtime ended; release whatever of it is left (idempotent) before booting on its disk.
      if (record.state === 'error') await this.deps.driver.stop(id).catch(() => undefined);
      const starting = await this.write(record, { state: 'resuming', desiredState: 'running' });
      try {
        await this.deps.driver.create(await this.createOptions(starting));
      } catch (error) {
        await this.write(starting, { state: 'stopped', desiredState: 'stopped' }).catch(() => undefined);
        throw runtimeFailure(`starting sandbox ${id} failed`, error);
      }
      return this.deps.service.view(await this.write(starting, { state: 'running' }));
    });
  }

  /**
   * Pause under the id's lock: `pausing` → checkpoint → `paused`. A failed checkpoint leaves the sandbox running.
   * @throws ApiError `deleted_file_open`, `host_socket_open` (its processes block the checkpoint), `runtime_error`
   */
  async pauseUnderLock(record: SandboxRecord): Promise<SandboxRecord> {
    const rowStartedMs = performance.now();
    const pausing = await this.write(record, { state: 'pausing', desiredState: 'paused' });
    const firstRowMs = Math.round(performance.now() - rowStartedMs);
    crashPoint('pause:after-pausing-row');
    const startedMs = this.deps.clock.nowMs();
    let info: CheckpointInfo;
    try {
      info = await this.deps.driver.pause(record.id);
      crashPoint('pause:after-runtime');
    } catch (error) {
      const observed = await this.deps.driver.observe(record.id).catch(() => null);
      const state: SandboxState = observed?.status === 'running' ? 'running' : 'error';
      await this.write(
        pausing,
        { state, desiredState: 'running' },
        this.condition('PauseFailed', 'CheckpointFailed', (error as Error).message),
      ).catch(() => undefined);
      throw runtimeFailure(`pausing sandbox ${record.id} failed`, error);
    }
    const driverMs = this.deps.clock.nowMs() - startedMs;
    const lastRowStartedMs = performance.now();
    const paused = await this.write(pausing, { state: 'paused' });
    // Where the time went besides the driver (its own steps are its `pause steps` line): the two row writes.
    const rowsMs = { pausing: firstRowMs, paused: Math.round(performance.now() - lastRowStartedMs) };
    this.deps.logger.child({ sandboxId: record.id }).info({ durationMs: driverMs, rowsMs, ...info }, 'sandbox paused');
    this.deps.metrics?.observeOperation('pause', driverMs);
    return paused;
  }

  /**
   * Resume under the id's lock: `resuming` → verify and restore → `running`. On failure the sandbox stays paused
   * with a `ResumeFailed` condition.
   * @throws ApiError `checkpoint_rejected`, `runtime_error`
   */
  async resumeUnderLock(record: SandboxRecord): Promise<SandboxRecord> {
    const resuming = await this.write(record, { state: 'resuming', desiredState: 'running' });
    crashPoint('resume:after-resuming-row');
    const startedMs = this.deps.clock.nowMs();
    try {
      await this.deps.driver.resume(await this.createOptions(resuming));
      crashPoint('resume:after-runtime');
    } catch (error) {
      const failure = runtimeFailure(`resuming sandbox ${record.id} failed`, error);
      await this.write(
        resuming,
        { state: 'paused', desiredState: 'paused' },
        this.condition(
          'ResumeFailed',
          failure.code === ErrorCode.checkpointRejected ? 'CheckpointRejected' : 'RestoreFailed',
          failure.message,
        ),
      ).catch(() => undefined);
      throw failure;
    }
    this.deps.logger
      .child({ sandboxId: record.id })
      .info({ durationMs: this.deps.clock.nowMs() - startedMs }, 'sandbox resumed');
    this.deps.metrics?.observeOperation('resume', this.deps.clock.nowMs() - startedMs);
    return this.write(resuming, { state: 'running' });
  }

  /**
   * Finish a transition a crash interrupted (a `pausing`, `resuming` or `stopping` row nothing works on): the
   * driver verbs are idempotent, so the step runs again toward the desired state; if that fails the row goes back
   * to what the host shows. Call under the id's lock.
   */
  async finishInterrupted(record: SandboxRecord): Promise<SandboxRecord> {
    const logger = this.deps.logger.child({ sandboxId: record.id });
    await this.deps.driver.settle(record.id).catch((error: unknown) => logger.warn({ err: error }, 'settle failed'));
    try {
      const reset = resetInProgress(record);
      if (record.state === 'resuming' && reset !== null) {
        // A reset was interrupted after its row named the target (and maybe after the old disk was deleted): do
        // it again from the start, never boot whatever half of it the host holds.
        await this.deps.driver.delete(record.id);
        const options = await this.createOptions(record);
        if (reset === RESET_IN_PROGRESS.template || record.snapshotId === null) await this.deps.driver.create(options);
        else {
          const sourceDir = await this.deps.blobs.open(record.snapshotId);
          const memory = reset === RESET_IN_PROGRESS.snapshot;
          await this.deps.driver.createFromSnapshot({ ...options, sourceDir, memory });
        }
        return await this.write(
          record,
          { state: 'running' },
          this.condition('Reset', 'ResetFinished', 'the reset was interrupted by a server restart and done again'),
        );
      }
      if (record.state === 'pausing') {
        await this.deps.driver.pause(record.id);
        return await this.write(record, { state: 'paused' });
      }
      if (record.state === 'stopping') {
        await this.deps.driver.stop(record.id);
        return await this.write(record, { state: 'stopped' });
      }
      if (record.state === 'resuming') {
        const observed = await this.deps.driver.observe(record.id);
        if (observed.status === 'paused' || observed.status === 'running') {
          await this.deps.driver.resume(await this.createOptions(record));
        } else if (observed.status === 'stopped') {
          await this.deps.driver.create(await this.createOptions(record));
        } else {
          throw new Error('nothing of the sandbox is left on the host');
        }
        return await this.write(record, { state: 'running' });
      }
      return record;
    } catch (error) {
      const observed = await this.deps.driver.observe(record.id).catch(() => null);
      const state: SandboxState =
        observed?.status === 'running'
          ? 'running'
          : observed?.status === 'paused'
            ? 'paused'
            : observed?.status === 'stopped'
              ? 'stopped'
              : 'error';
      logger.warn({ err: error, state }, 'finishing an interrupted transition failed; back to what the host shows');
      return this.write(
        record,
        { state, desiredState: state === 'error' ? record.desiredState : (state as 'running' | 'paused' | 'stopped') },
        this.condition(
          'TransitionFailed',
          'Interrupted',
          `the server stopped during ${record.state} and could not finish it: ${(error as Error).message}`,
        ),
      );
    }
  }

  /**
   * N new running sandboxes from one checkpoint of `id` (running: held still only for the checkpoint; or paused).
   * @throws ApiError `sandbox_not_found`, `sandbox_not_running`, `unsupported`, `runtime_error` (no child is left)
   */
  async fork(
    caller: Principal,
    id: string,
    input: { count: number; volumes?: ForkVolumes | undefined },
  ): Promise<ForkSandboxResponse> {
    return this.deps.mutex.run(id, async () => {
      const parent = await this.deps.service.require(caller.tenantId, id);
      this.expectState(parent, ['running', 'paused'], 'fork');
      const now = isoNow(this.deps.clock);
      const children: SandboxRecord[] = Array.from({ length: input.count }, () => {
        const childId = newId('sbx');
        return {
          ...parent,
          id: childId,
          state: 'creating',
          desiredState: 'running',
          conditions: [],
          hostname: childId.replace('_', '-'),
          parentId: parent.id,
          snapshotId: null,
          expiresAt: expiresAtFor(this.deps.clock.nowMs(), parent.timeoutMs),
          createdAt: now,
          updatedAt: now,
          version: 1,
        };
      });
      // The children's locks keep the reconciler off their `creating` rows while the fork runs.
      return this.withLocks(
        children.map((c) => c.id),
        () => this.forkUnderLocks(parent, children, input.volumes ?? 'fork'),
      );
    });
  }

  private async forkUnderLocks(
    parent: SandboxRecord,
    children: SandboxRecord[],
    volumeMode: ForkVolumes,
  ): Promise<ForkSandboxResponse> {
    const id = parent.id;
    {
      const plan = await this.deps.volumes?.planFork(
        parent.tenantId,
        id,
        children.map((c) => c.id),
        volumeMode,
      );
      const childMounts = (childId: string) => plan?.mounts.get(childId) ?? [];
      try {
        for (const child of children) {
          await this.deps.sandboxes.insert(child, { also: this.deps.volumes?.insertMounts(childMounts(child.id)) });
        }
      } catch (error) {
        for (const child of children) await this.deps.sandboxes.remove(child.tenantId, child.id);
        await this.deps.volumes?.undoFork(parent.tenantId, plan?.made ?? []);
        throw error;
      }
      // The children hold the parent's secret placeholders (copied env), so they get its bindings too.
      await this.deps.secrets?.copyBindings(
        id,
        children.map((child) => child.id),
      );
      crashPoint('fork:after-child-rows');
      const startedMs = this.deps.clock.nowMs();
      try {
        const options = await this.createOptions(parent);
        await this.deps.driver.fork(id, {
          template: options.template,
          resources: options.resources,
          // The children inherit the parent's policy (their rows copy it) and get their own addresses.
          network: options.network,
          volumes: options.volumes,
          children: children.map((c) => ({
            sandboxId: c.id,
            hostname: c.hostname,
            volumes: this.deps.volumes?.binds(childMounts(c.id)),
          })),
        });
      } catch (error) {
        for (const child of children) await this.deps.sandboxes.remove(child.tenantId, child.id);
        await this.deps.volumes?.undoFork(parent.tenantId, plan?.made ?? []);
        throw runtimeFailure(`forking sandbox ${id} failed`, error);
      }
      crashPoint('fork:after-runtime');
      // One transaction: a crash leaves every child `creating` (the restart deletes them all) or every child running.
      const running = await this.deps.sandboxes.updateStates(
        children.map((c) => ({ tenantId: c.tenantId, id: c.id, expectedVersion: c.version })),
        'running',
        isoNow(this.deps.clock),
      );
      if (running === null) {
        throw new ApiError(ErrorCode.conflict, `the children of ${id} changed while they were forked`, {
          hint: `list them with GET /v1/sandboxes?parentId=${id}`,
        });
      }
      const items: Sandbox[] = running.map((r) => this.deps.service.view(r));
      crashPoint('fork:after-rows');
      this.deps.logger
        .child({ sandboxId: id })
        .info({ count: children.length, durationMs: this.deps.clock.nowMs() - startedMs }, 'sandbox forked');
      this.deps.metrics?.observeOperation('fork', this.deps.clock.nowMs() - startedMs);
      return { items };
    }
  }

  /** Run `fn` holding the lock of every id in `ids`. */
  private withLocks<T>(ids: string[], fn: () => Promise<T>): Promise<T> {
    const [first, ...rest] = ids;
    if (first === undefined) return fn();
    return this.deps.mutex.run(first, () => this.withLocks(rest, fn));
  }

  /**
   * Take a snapshot of `id` into the blob store. Its `snapshot_created` event and its retention deadline
   * (`retentionMs` from now, when given) commit with the row's move to `ready`.
   * @throws ApiError `sandbox_not_found`, `sandbox_not_running`, `snapshot_exists`, `invalid_request`, `runtime_error`
   */
  async createSnapshot(
    caller: Principal,
    id: string,
    input: { name?: string | undefined; memory: boolean; retentionMs?: number | undefined },
  ): Promise<Snapshot> {
    return this.deps.mutex.run(id, async () => {
      const record = await this.deps.service.require(caller.tenantId, id);
      this.expectState(record, input.memory ? ['running', 'paused'] : ['running', 'paused', 'stopped'], 'snapshot');
      if (input.name !== undefined && (await this.deps.snapshots.find(caller.tenantId, input.name)) !== null) {
        throw new ApiError(ErrorCode.snapshotExists, `a snapshot named ${input.name} exists`, {
          hint: 'pick another name, or delete the old snapshot first',
        });
      }
      const snapshot: SnapshotRecord = {
        id: newId('snp'),
        tenantId: caller.tenantId,
        name: input.name ?? null,
        sandboxId: id,
        template: record.template,
        templateId: record.templateId,
        memory: input.memory,
        state: 'creating',
        imageSizeBytes: 0,
        diskSizeBytes: 0,
        runtimeVersion: '',
        settings: {
          env: record.env,
          cwd: record.cwd,
          cpuCount: record.cpuCount,
          memoryMiB: record.memoryMiB,
          diskMiB: record.diskMiB,
          autoResume: record.autoResume,
        },
        createdAt: isoNow(this.deps.clock),
      };
      await this.deps.snapshots.insert(snapshot);
      try {
        const staged = await this.deps.blobs.stage(snapshot.id);
        const info = await this.deps.driver.snapshot(id, { targetDir: staged, memory: input.memory });
        await this.deps.blobs.commit(snapshot.id, staged);
        const expiresAt =
          input.retentionMs === undefined ? null : new Date(this.deps.clock.nowMs() + input.retentionMs).toISOString();
        const created = this.deps.events?.inTransaction({
          tenantId: caller.tenantId,
          type: 'snapshot_created',
          sandboxId: id,
          snapshotId: snapshot.id,
          message: `snapshot ${snapshot.name ?? snapshot.id} of ${id} taken`,
          // sizeBytes: what usage metering counts as the snapshot's stored GiB from here until it is deleted.
          data: {
            name: snapshot.name,
            memory: snapshot.memory,
            expiresAt,
            sizeBytes: info.imageSizeBytes + info.diskSizeBytes,
          },
        });
        await this.deps.snapshots.markReady(snapshot.id, info, {
          also: created,
          ...(expiresAt === null ? {} : { expiresAt }),
        });
        return toSnapshot({ ...snapshot, ...info, state: 'ready', expiresAt }, this.uploadOf(snapshot.id));
      } catch (error) {
        await this.deps.blobs.delete(snapshot.id).catch(() => undefined);
        await this.deps.snapshots.remove(snapshot.id);
        throw runtimeFailure(`snapshot of ${id} failed`, error);
      }
    });
  }

  async listSnapshots(caller: Principal, query: { sandboxId?: string | undefined }): Promise<SnapshotList> {
    const rows = await this.deps.snapshots.list(caller.tenantId, query);
    return { items: rows.filter((r) => r.state === 'ready').map((r) => toSnapshot(r, this.uploadOf(r.id))) };
  }

  /** @throws ApiError `snapshot_not_found` */
  async getSnapshot(caller: Principal, ref: string): Promise<Snapshot> {
    const snapshot = await this.requireSnapshot(caller.tenantId, ref);
    return toSnapshot(snapshot, this.uploadOf(snapshot.id));
  }

  /** The upload state of a snapshot's bytes in a remote blob store, or null. */
  private uploadOf(snapshotId: string): Snapshot['upload'] {
    return this.deps.blobs.uploadStatus?.(snapshotId) ?? null;
  }

  /**
   * Delete a snapshot and its bytes; its `snapshot_deleted` event commits with the row's removal. The row goes
   * first: a crash before the bytes are gone leaves an unowned blob the reconciler reaps, never a row without bytes.
   * @throws ApiError `snapshot_not_found`
   */
  async deleteSnapshot(caller: Principal, ref: string): Promise<void> {
    const snapshot = await this.requireSnapshot(caller.tenantId, ref);
    await this.deps.snapshots.remove(snapshot.id, {
      also: this.deps.events?.inTransaction({
        tenantId: caller.tenantId,
        type: 'snapshot_deleted',
        sandboxId: snapshot.sandboxId,
        snapshotId: snapshot.id,
        message: `snapshot ${snapshot.name ?? snapshot.id} deleted`,
        data: { name: snapshot.name },
      }),
    });
    await this.deps.blobs.delete(snapshot.id);
  }

  /** @throws ApiError `snapshot_not_found` */
  async requireSnapshot(tenantId: string, ref: string): Promise<SnapshotRecord> {
    const snapshot = await this.deps.snapshots.find(tenantId, ref);
    if (snapshot === null || snapshot.state !== 'ready') {
      throw new ApiError(ErrorCode.snapshotNotFound, `no snapshot ${ref}`, {
        hint: 'list snapshots with `burrow snapshot ls` (GET /v1/snapshots)',
      });
    }
    return snapshot;
  }

  /** Runtime options that re-create `record` on the host. */
  async createOptions(record: SandboxRecord): Promise<CreateOptions> {
    const resources: Resources = { cpuCount: record.cpuCount, memoryMiB: record.memoryMiB, diskMiB: record.diskMiB };
    return {
      sandboxId: record.id,
      template: await this.deps.templates.refById(record.templateId, record.template),
      resources,
      hostname: record.hostname,
      network: record.network ?? undefined,
      volumes: await this.deps.volumes?.bindsOf(record.id),
    };
  }

  private expectState(record: SandboxRecord, allowed: SandboxState[], verb: string): void {
    if (allowed.includes(record.state)) return;
    throw new ApiError(ErrorCode.sandboxNotRunning, `cannot ${verb} sandbox ${record.id}: it is ${record.state}`, {
      hint: `${verb} works on a sandbox that is ${allowed.join(' or ')}`,
      details: { state: record.state },
    });
  }

  private condition(type: string, reason: string, message: string): Condition {
    return { type, status: 'true', reason, message, at: isoNow(this.deps.clock) };
  }

  private async write(record: SandboxRecord, patch: SandboxPatch, added?: Condition): Promise<SandboxRecord> {
    const updated = await this.deps.sandboxes.update(
      record.tenantId,
      record.id,
      record.version,
      { ...patch, ...(added === undefined ? {} : { conditions: withConditions(record.conditions, [added]) }) },
      isoNow(this.deps.clock),
    );
    if (updated === null) {
      throw new ApiError(ErrorCode.conflict, `sandbox ${record.id} changed meanwhile`, { hint: 'retry' });
    }
    return updated;
  }
}
