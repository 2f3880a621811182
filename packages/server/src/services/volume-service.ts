import {
  ErrorCode,
  type ForkVolumes,
  mountPathProblem,
  mountPathsOverlap,
  type Volume,
  type VolumeList,
  type VolumeMount,
} from '@burrow/contract';
import { crashPoint, SandboxFs, type VolumeBind, type VolumeHost } from '@burrow/runtime';
import type { Logger } from 'pino';
import type { SandboxStore } from '../store/sandbox-store.js';
import type { VolumeMountRecord, VolumeRecord, VolumeStore } from '../store/volume-store.js';
import { ApiError } from '../util/api-error.js';
import { type Clock, isoNow } from '../util/clock.js';
import { decodeCursor, encodeCursor } from '../util/cursor.js';
import { newId } from '../util/ids.js';
import type { KeyedMutex } from '../util/keyed-mutex.js';
import type { Principal } from './key-service.js';

/** Dependencies of {@link VolumeService}. */
export interface VolumeServiceDeps {
  volumes: VolumeStore;
  sandboxes: SandboxStore;
  host: VolumeHost;
  mutex: KeyedMutex;
  clock: Clock;
  logger: Logger;
}

/** A create request's `volumes` entry after contract parsing. */
export interface MountRequest {
  name: string;
  path: string;
  readOnly: boolean;
}

/** A mount checked against the tenant's volumes, ready to be inserted with its sandbox. */
export type ResolvedMount = VolumeMountRecord & { shared: boolean; name: string };

/** Sandbox states in which a forced delete may detach a volume (nothing of it is open on the host). */
const DETACHABLE_STATES = new Set(['stopped', 'paused', 'error', 'deleted']);

const volumeNotFound = (ref: string) =>
  new ApiError(ErrorCode.volumeNotFound, `no volume ${ref}`, {
    hint: 'list your volumes with `burrow volume ls` (GET /v1/volumes)',
  });

/**
 * Volumes of a tenant: create, list, get, grow, delete, snapshot and fork, and the mounts a sandbox create asks for.
 * Every operation on one volume holds its lock (`volume:<id>`); rows are written before and after each host step,
 * and {@link reconcile} finishes or undoes what a crash interrupted.
 */
export class VolumeService {
  constructor(private readonly deps: VolumeServiceDeps) {}

  /**
   * Make a volume and return once its storage is mounted on the host.
   * @throws ApiError `volume_exists`; QuotaExceededError; ApiError `runtime_error` (nothing is left)
   */
  async create(
    caller: Principal,
    input: { name: string; sizeMiB: number; labels: Record<string, string>; shared: boolean },
  ): Promise<Volume> {
    const now = isoNow(this.deps.clock);
    const record: VolumeRecord = {
      id: newId('vol'),
      tenantId: caller.tenantId,
      name: input.name,
      kind: 'volume',
      sizeMiB: input.sizeMiB,
      labels: input.labels,
      shared: input.shared,
      state: 'creating',
      sourceId: null,
      copyMethod: null,
      expiresAt: null,
      createdAt: now,
      updatedAt: now,
    };
    return this.deps.mutex.run(`volume:${record.id}`, async () => {
      await this.insert(record);
      crashPoint('volume-create:after-row');
      try {
        await this.deps.host.create(record.id, record.sizeMiB);
        crashPoint('volume-create:after-storage');
      } catch (error) {
        await this.deps.volumes.remove(record.tenantId, record.id);
        throw hostFailure(`creating volume ${record.name} failed`, error);
      }
      await this.deps.volumes.markReady(record.tenantId, record.id, null, isoNow(this.deps.clock));
      return this.view({ ...record, state: 'ready' });
    });
  }

  private async insert(record: VolumeRecord): Promise<void> {
    try {
      await this.deps.volumes.insert(record);
    } catch (error) {
      if ((error as Error).name === 'VolumeNameTakenError') {
        throw new ApiError(ErrorCode.volumeExists, `a volume named ${record.name} already exists`, {
          hint: 'pick another name, or delete the old volume first',
        });
      }
      throw error;
    }
  }

  /** @throws ApiError `volume_not_found` (also for another tenant's) */
  async get(caller: Principal, ref: string): Promise<Volume> {
    return this.view(await this.require(caller.tenantId, ref));
  }

  /** The ready volume `ref` of `tenantId`. @throws ApiError `volume_not_found` */
  async require(tenantId: string, ref: string): Promise<VolumeRecord> {
    const record = await this.deps.volumes.get(tenantId, ref);
    if (record === null || record.state !== 'ready') throw volumeNotFound(ref);
    return record;
  }

  /** @throws ApiError `invalid_request` for a cursor this server did not make */
  async list(
    caller: Principal,
    query: {
      kind?: 'volume' | 'snapshot' | undefined;
      sourceId?: string | undefined;
      label: string[];
      limit: number;
      cursor?: string | undefined;
    },
  ): Promise<VolumeList> {
    const after = query.cursor === undefined ? null : decodeCursor(query.cursor);
    if (query.cursor !== undefined && after === null) {
      throw new ApiError(ErrorCode.invalidRequest, 'the cursor is not one this server returned', {
        hint: 'pass the nextCursor of the previous page, or leave it out for the first page',
      });
    }
    const labels = query.label.map((l): [string, string] => {
      const at = l.indexOf('=');
      return [l.slice(0, at), l.slice(at + 1)];
    });
    const rows = await this.deps.volumes.list(caller.tenantId, {
      kind: query.kind,
      sourceId: query.sourceId,
      labels,
      after,
      limit: query.limit + 1,
    });
    const page = rows.filter((r) => r.state === 'ready').slice(0, query.limit);
    const last = rows.length > query.limit ? rows[query.limit - 1] : undefined;
    return {
      items: await Promise.all(page.map((r) => this.view(r))),
      nextCursor: last === undefined ? null : encodeCursor({ createdAt: last.createdAt, id: last.id }),
    };
  }

  /**
   * Grow a volume to `sizeMiB` (same size: nothing to do).
   * @throws ApiError `volume_shrink_refused`, `invalid_request` (a snapshot), `volume_in_use` (a host that cannot
   *   grow a mounted filesystem while a sandbox holds it); QuotaExceededError
   */
  async resize(caller: Principal, ref: string, sizeMiB: number): Promise<Volume> {
    const found = await this.require(caller.tenantId, ref);
    return this.deps.mutex.run(`volume:${found.id}`, async () => {
      const record = await this.require(caller.tenantId, found.id);
      if (record.kind === 'snapshot') {
        throw new ApiError(ErrorCode.invalidRequest, `volume snapshot ${record.name} is read-only and keeps its size`, {
          hint: 'fork it (`burrow volume fork`) and resize the fork',
        });
      }
      if (sizeMiB < record.sizeMiB) {
        throw new ApiError(
          ErrorCode.volumeShrinkRefused,
          `volume ${record.name} is ${record.sizeMiB} MiB; volumes only grow`,
          {
            hint: `pass sizeMiB of at least ${record.sizeMiB}, or copy what you keep into a new, smaller volume`,
            details: { sizeMiB: record.sizeMiB, requestedMiB: sizeMiB },
          },
        );
      }
      if (sizeMiB === record.sizeMiB) return this.view(record);
      await this.deps.volumes.grow(record.tenantId, record.id, record.sizeMiB, sizeMiB, isoNow(this.deps.clock));
      try {
        await this.deps.host.grow(record.id, sizeMiB);
      } catch (error) {
        await this.deps.volumes.grow(record.tenantId, record.id, sizeMiB, record.sizeMiB, isoNow(this.deps.clock));
        if ((error as { code?: string }).code === ErrorCode.volumeInUse) {
          throw new ApiError(ErrorCode.volumeInUse, `${(error as Error).message}`, {
            hint: 'stop or pause the sandboxes that mount it, then resize again',
            details: { sandboxIds: (await this.deps.volumes.mountsOfVolume(record.id)).map((m) => m.sandboxId) },
          });
        }
        throw hostFailure(`growing volume ${record.name} failed`, error);
      }
      return this.view({ ...record, sizeMiB });
    });
  }

  /**
   * Delete a volume and its storage. Refused while any sandbox mounts it, unless `force`, which detaches it from
   * stopped, paused and failed sandboxes (never from one that runs).
   * @throws ApiError `volume_not_found`, `volume_in_use`
   */
  async remove(caller: Principal, ref: string, options: { force: boolean }): Promise<void> {
    const found = await this.require(caller.tenantId, ref);
    await this.deps.mutex.run(`volume:${found.id}`, async () => {
      const record = await this.require(caller.tenantId, found.id);
      const mounts = await this.deps.volumes.mountsOfVolume(record.id);
      if (mounts.length > 0) {
        const states = await Promise.all(
          mounts.map(async (m) => (await this.deps.sandboxes.get(m.tenantId, m.sandboxId))?.state ?? 'deleted'),
        );
        const busy = mounts.filter((_, i) => !DETACHABLE_STATES.has(states[i] ?? 'deleted')).map((m) => m.sandboxId);
        if (!options.force || busy.length > 0) {
          const holders = options.force ? busy : mounts.map((m) => m.sandboxId);
          throw new ApiError(
            ErrorCode.volumeInUse,
            `volume ${record.name} is mounted by ${holders.join(', ')}${options.force ? ', which run' : ''}`,
            {
              hint: options.force
                ? 'stop, pause or delete those sandboxes first'
                : 'delete those sandboxes first, or pass force (CLI --force) to detach it from stopped and paused ones',
              details: { sandboxIds: holders },
            },
          );
        }
        await this.deps.volumes.detach(
          record.id,
          mounts.map((m) => m.sandboxId),
        );
      }
      await this.deps.volumes.setState(record.tenantId, record.id, 'deleting', isoNow(this.deps.clock));
      await this.deps.host.delete(record.id);
      await this.deps.volumes.remove(record.tenantId, record.id);
    });
  }

  /**
   * A read-only point-in-time copy of volume `ref` (`kind: 'snapshot'`), or a writable fork of it.
   * @throws ApiError `volume_not_found`, `volume_exists`, `invalid_request` (a snapshot of a snapshot);
   *   QuotaExceededError
   */
  async copy(
    caller: Principal,
    ref: string,
    as: 'snapshot' | 'fork',
    input: { name: string; labels: Record<string, string>; retentionMs?: number | undefined },
  ): Promise<Volume> {
    const source = await this.require(caller.tenantId, ref);
    if (as === 'snapshot' && source.kind === 'snapshot') {
      throw new ApiError(ErrorCode.invalidRequest, `${source.name} is a volume snapshot already`, {
        hint: 'fork it to get a writable volume, or snapshot the volume it came from',
      });
    }
    if (as === 'fork' && input.retentionMs !== undefined) {
      throw new ApiError(ErrorCode.invalidRequest, 'retentionMs applies to volume snapshots only', {
        hint: 'leave retentionMs out of a fork',
      });
    }
    const now = isoNow(this.deps.clock);
    const nowMs = this.deps.clock.nowMs();
    const record: VolumeRecord = {
      id: newId('vol'),
      tenantId: caller.tenantId,
      name: input.name,
      kind: as === 'snapshot' ? 'snapshot' : 'volume',
      sizeMiB: source.sizeMiB,
      labels: input.labels,
      shared: as === 'fork' ? source.shared : false,
      state: 'creating',
      sourceId: source.id,
      copyMethod: null,
      expiresAt: input.retentionMs === undefined ? null : new Date(nowMs + input.retentionMs).toISOString(),
      createdAt: now,
      updatedAt: now,
    };
    // The source's lock: a grow or delete of it waits for the copy.
    return this.deps.mutex.run(`volume:${source.id}`, async () => {
      await this.insert(record);
      let method: VolumeRecord['copyMethod'];
      try {
        ({ method } = await this.deps.host.copy(source.id, record.id, { readOnly: record.kind === 'snapshot' }));
      } catch (error) {
        await this.deps.volumes.remove(record.tenantId, record.id);
        throw hostFailure(`copying volume ${source.name} failed`, error);
      }
      await this.deps.volumes.markReady(record.tenantId, record.id, method, isoNow(this.deps.clock));
      this.deps.logger.info(
        { volumeId: source.id, copyId: record.id, as, method, durationMs: this.deps.clock.nowMs() - nowMs },
        'volume copied',
      );
      return this.view({ ...record, state: 'ready', copyMethod: method });
    });
  }

  /**
   * Check a create request's `volumes` against the tenant's volumes: paths (absolute, normalized, not reserved, not
   * overlapping), existence, read-only snapshots, one read-write mount of a volume that is not shared.
   * @throws ApiError `volume_mount_invalid`, `volume_not_found`, `volume_mount_conflict`
   */
  async resolveMounts(
    tenantId: string,
    sandboxId: string,
    requests: readonly MountRequest[],
  ): Promise<ResolvedMount[]> {
    const resolved: ResolvedMount[] = [];
    for (const [position, request] of requests.entries()) {
      const problem = mountPathProblem(request.path);
      if (problem !== null) {
        throw new ApiError(
          ErrorCode.volumeMountInvalid,
          `cannot mount ${request.name} at ${request.path}: ${problem}`,
          {
            hint: 'mount volumes at an absolute path of your own, for example /data or /workspace/cache',
            details: { path: request.path },
          },
        );
      }
      const clash = resolved.find((r) => mountPathsOverlap(r.path, request.path));
      if (clash !== undefined) {
        throw new ApiError(
          ErrorCode.volumeMountInvalid,
          `mount paths ${clash.path} and ${request.path} overlap: one volume would hide the other`,
          { hint: 'mount each volume at a path of its own, neither under the other', details: { path: request.path } },
        );
      }
      const volume = await this.require(tenantId, request.name);
      if (volume.kind === 'snapshot' && !request.readOnly) {
        throw new ApiError(ErrorCode.volumeMountConflict, `volume snapshot ${volume.name} mounts read-only only`, {
          hint: 'pass readOnly: true (CLI NAME:/path:ro), or fork the snapshot for a writable copy',
          details: { volumeId: volume.id },
        });
      }
      const twice = resolved.find((r) => r.volumeId === volume.id && !r.readOnly && !request.readOnly);
      if (twice !== undefined && !volume.shared) {
        throw new ApiError(
          ErrorCode.volumeMountConflict,
          `volume ${volume.name} is mounted read-write twice in this request; it is not shared`,
          { hint: 'mount it read-write once', details: { volumeId: volume.id } },
        );
      }
      resolved.push({
        sandboxId,
        volumeId: volume.id,
        tenantId,
        path: request.path,
        readOnly: request.readOnly || volume.kind === 'snapshot',
        position,
        shared: volume.shared,
        name: volume.name,
      });
    }
    return resolved;
  }

  /**
   * The mounts of each fork child of `parentId` by `mode`: read-only and `shared` mounts are the parent's; a read-write
   * mount of another volume is, per child, a fork of it named `<volume>-<child id suffix>` (`fork`), the same
   * volume read-only (`share-readonly`), or refused (`refuse`). Forks are made here (before the sandbox fork: writes
   * the parent makes between the two are not in the child's copy); {@link undoFork} removes them.
   * @throws ApiError `volume_mount_conflict` (`refuse` with a read-write mount); QuotaExceededError
   */
  async planFork(
    tenantId: string,
    parentId: string,
    childIds: readonly string[],
    mode: ForkVolumes,
  ): Promise<{ mounts: Map<string, ResolvedMount[]>; made: string[] }> {
    const parentMounts = await this.deps.volumes.mountsOfSandbox(parentId);
    const mounts = new Map<string, ResolvedMount[]>();
    const made: string[] = [];
    if (parentMounts.length === 0) return { mounts, made };
    const volumes = new Map<string, VolumeRecord>();
    for (const m of parentMounts) {
      const volume = await this.deps.volumes.get(tenantId, m.volumeId);
      if (volume === null) throw volumeNotFound(m.volumeId);
      volumes.set(m.volumeId, volume);
      if (mode === 'refuse' && !m.readOnly && !volume.shared) {
        throw new ApiError(
          ErrorCode.volumeMountConflict,
          `sandbox ${parentId} mounts volume ${volume.name} read-write; the fork asked to refuse that`,
          {
            hint: "pass volumes: 'fork' (a copy per child) or 'share-readonly' (CLI --volumes)",
            details: { volumeId: volume.id },
          },
        );
      }
    }
    try {
      for (const childId of childIds) {
        const list: ResolvedMount[] = [];
        for (const m of parentMounts) {
          const volume = volumes.get(m.volumeId) as VolumeRecord;
          const base = { ...m, sandboxId: childId, shared: volume.shared, name: volume.name };
          if (m.readOnly || volume.shared) list.push(base);
          else if (mode === 'share-readonly') list.push({ ...base, readOnly: true });
          else {
            const caller: Principal = { keyId: 'system:fork', tenantId, role: 'admin' };
            const name = `${volume.name.slice(0, 40)}-${childId.slice(-12)}`;
            const copy = await this.copy(caller, volume.id, 'fork', {
              name,
              labels: { 'burrow.dev/fork-of': parentId },
            });
            made.push(copy.id);
            list.push({ ...base, volumeId: copy.id, name, shared: false });
          }
        }
        mounts.set(childId, list);
      }
    } catch (error) {
      await this.undoFork(tenantId, made);
      throw error;
    }
    return { mounts, made };
  }

  /** Delete the volume forks {@link planFork} made (a sandbox fork that failed). */
  async undoFork(tenantId: string, made: readonly string[]): Promise<void> {
    for (const id of made) {
      await this.deps.mutex.run(`volume:${id}`, async () => {
        await this.deps.host
          .delete(id)
          .catch((error: unknown) => this.deps.logger.warn({ err: error, volumeId: id }, 'volume fork left'));
        await this.deps.volumes.remove(tenantId, id);
      });
    }
  }

  /** Inside the sandbox insert's transaction: the mount rows (a conflicting read-write mount rolls it back). */
  insertMounts(mounts: readonly ResolvedMount[]) {
    return async (trx: Parameters<VolumeStore['insertMounts']>[0]) => {
      await this.deps.volumes.insertMounts(trx, mounts);
      return null;
    };
  }

  /** The driver's binds for mounts. */
  binds(mounts: readonly Pick<VolumeMountRecord, 'volumeId' | 'path' | 'readOnly'>[]): VolumeBind[] {
    return mounts.map((m) => ({ hostPath: this.deps.host.rootDir(m.volumeId), path: m.path, readOnly: m.readOnly }));
  }

  /** The driver's binds of sandbox `sandboxId` (from its mount rows). */
  async bindsOf(sandboxId: string): Promise<VolumeBind[]> {
    return this.binds(await this.deps.volumes.mountsOfSandbox(sandboxId));
  }

  /** The API view of a sandbox's mounts. */
  async mountsView(sandboxId: string): Promise<VolumeMount[]> {
    const mounts = await this.deps.volumes.mountsOfSandbox(sandboxId);
    return Promise.all(mounts.map((m) => this.mountView(m)));
  }

  private async mountView(m: VolumeMountRecord): Promise<VolumeMount> {
    const volume = await this.deps.volumes.get(m.tenantId, m.volumeId);
    return {
      volumeId: m.volumeId,
      name: volume?.name ?? m.volumeId,
      sandboxId: m.sandboxId,
      path: m.path,
      readOnly: m.readOnly,
    };
  }

  /**
   * Run `fn` with the file view of volume `ref`, resolved inside its root like a sandbox's files.
   * @throws ApiError `volume_not_found`, `forbidden` (`write` on a volume snapshot); whatever `fn` throws (FsError
   *   for file failures)
   */
  async withFiles<T>(
    caller: Principal,
    ref: string,
    fn: (fs: SandboxFs) => Promise<T>,
    options: { write?: boolean } = {},
  ): Promise<T> {
    const record = await this.require(caller.tenantId, ref);
    if (options.write === true && record.kind === 'snapshot') {
      throw new ApiError(ErrorCode.forbidden, `volume snapshot ${record.name} is read-only (EROFS)`, {
        hint: 'fork it (`burrow volume fork`) and write to the fork',
      });
    }
    return fn(new SandboxFs(this.deps.host.rootDir(record.id)));
  }

  /**
   * At start and on each pass: remove rows a crash left `creating` or `deleting` with their storage, mount every
   * ready volume again (a restart or reboot unmounted it), and delete storage no row owns.
   * @returns ids whose storage was removed
   */
  async reconcile(): Promise<string[]> {
    const removed: string[] = [];
    const rows = await this.deps.volumes.listAcrossTenants();
    const live = new Set<string>();
    for (const row of rows) {
      await this.deps.mutex.run(`volume:${row.id}`, async () => {
        if (row.state === 'ready') {
          live.add(row.id);
          await this.deps.host
            .ensureMounted(row.id, { readOnly: row.kind === 'snapshot' })
            .catch((error: unknown) =>
              this.deps.logger.error({ err: error, volumeId: row.id }, 'volume cannot be mounted'),
            );
          return;
        }
        await this.deps.host.delete(row.id);
        await this.deps.volumes.remove(row.tenantId, row.id);
        removed.push(row.id);
      });
    }
    for (const id of await this.deps.host.list()) {
      if (live.has(id) || rows.some((r) => r.id === id)) continue;
      await this.deps.host.delete(id);
      removed.push(id);
    }
    return removed;
  }

  private retentionTimer: NodeJS.Timeout | null = null;

  /** Run {@link expire} every `intervalMs` until {@link stopRetention}. */
  startRetention(intervalMs: number): void {
    if (this.retentionTimer !== null) return;
    this.retentionTimer = setInterval(() => {
      this.expire().catch((error: unknown) => this.deps.logger.warn({ err: error }, 'volume retention pass failed'));
    }, intervalMs);
    this.retentionTimer.unref();
  }

  /** Stop the retention loop. */
  stopRetention(): void {
    if (this.retentionTimer !== null) clearInterval(this.retentionTimer);
    this.retentionTimer = null;
  }

  /** Delete volume snapshots whose retention ran out. @returns their ids */
  async expire(): Promise<string[]> {
    const nowMs = this.deps.clock.nowMs();
    const due = (await this.deps.volumes.listAcrossTenants()).filter(
      (r) => r.state === 'ready' && r.expiresAt !== null && Date.parse(r.expiresAt) <= nowMs,
    );
    const gone: string[] = [];
    for (const row of due) {
      const caller: Principal = { keyId: 'system:retention', tenantId: row.tenantId, role: 'admin' };
      try {
        await this.remove(caller, row.id, { force: false });
        gone.push(row.id);
      } catch (error) {
        this.deps.logger.warn({ err: error, volumeId: row.id }, 'expired volume snapshot kept: it is mounted');
      }
    }
    return gone;
  }

  private async view(r: VolumeRecord): Promise<Volume> {
    const usage = await this.deps.host.usage(r.id).catch(() => null);
    const mounts = await this.deps.volumes.mountsOfVolume(r.id);
    return {
      id: r.id,
      name: r.name,
      kind: r.kind,
      sizeMiB: r.sizeMiB,
      usedBytes: usage?.usedBytes ?? null,
      labels: r.labels,
      shared: r.shared,
      lineage: { sourceId: r.sourceId, copyMethod: r.copyMethod },
      mounts: mounts.map((m) => ({
        volumeId: m.volumeId,
        name: r.name,
        sandboxId: m.sandboxId,
        path: m.path,
        readOnly: m.readOnly,
      })),
      expiresAt: r.expiresAt,
      createdAt: r.createdAt,
      updatedAt: r.updatedAt,
    };
  }
}

function hostFailure(message: string, error: unknown): ApiError {
  return new ApiError(ErrorCode.runtimeError, `${message}: ${(error as Error).message}`, {
    hint: 'retry; if it keeps failing, the server log has the host output under this request id',
    cause: error,
  });
}
