import { randomBytes } from 'node:crypto';
import { mkdir, rm } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { crashPoint, type ForkOptions, RuntimeError } from '@burrow/runtime';
import {
  copySparse,
  type RuntimeIdentity,
  readManifest,
  type StateLocation,
  snapshotLocation,
  verifyState,
} from './checkpoint-files.js';
import { type CheckpointHost, StepTimer } from './checkpoint-host.js';
import { dropAside, flushDisk } from './checkpoint-host-steps.js';
import type { GvisorRestorer } from './gvisor-restore.js';
import { openImage } from './image-encryption.js';
import { abortError } from './run-command.js';

/**
 * Most children restored at once by a fork: restores are CPU-bound in runsc, so one per core (at least 2: a
 * child's copy, mount and hostname exec wait on I/O and processes, not on the CPU).
 */
const FORK_CONCURRENCY = Math.max(2, availableParallelism());

/** What a fork needs from the checkpointer (package-internal: `GvisorCheckpointer` binds it). */
export interface ForkSteps {
  readonly host: CheckpointHost;
  readonly restorer: GvisorRestorer;
  /** Where the pause state of a sandbox lives. */
  pauseLocation(sandboxId: string): StateLocation;
  /** The runsc build and platform that take and verify images. */
  runtime(): Promise<RuntimeIdentity>;
  /** `runsc pause` of a running container. @throws RuntimeError when runsc fails */
  holdStill(sandboxId: string): Promise<void>;
  /** Checkpoint a container held still into `imageDir` (encrypted when image encryption is on); it keeps running. */
  checkpoint(sandboxId: string, imageDir: string, sentryPid: number): Promise<void>;
  /** `runsc resume` of a container held still; never rejects (a failure is logged). */
  letContinue(sandboxId: string): Promise<void>;
}

/** Fork on gVisor: a fork point of the parent, then the children restored from it. */
export class GvisorForker {
  private readonly host: CheckpointHost;

  constructor(private readonly steps: ForkSteps) {
    this.host = steps.host;
  }

  /**
   * Fork: one fork point, then one restore per child on its own copy of the disk, {@link FORK_CONCURRENCY} at a
   * time. A running parent is held still only for its checkpoint and the copy of its disk (`fork-<tag>/`, removed
   * after; its `runsc resume` runs while the children are restored). A paused parent is forked from its pause image
   * and disk in place, verified once for the whole fork (fingerprints, else checksums) and never written.
   * A fork point made in this call is restored at once and not checksummed: nothing but this call reads it, and a
   * crash removes it (`settle`).
   */
  async fork(sandboxId: string, options: ForkOptions): Promise<void> {
    const paths = this.host.paths(sandboxId);
    const pointDir = join(paths.dir, `fork-${randomBytes(6).toString('hex')}`);
    const created = new Set<string>();
    const timer = new StepTimer();
    const childSteps: Array<Record<string, number>> = [];
    let parentContinues: Promise<void> = Promise.resolve();
    /** Removes the fork source's decrypted image from the tmpfs (image encryption on). */
    let removePlainImage: () => Promise<void> = async () => undefined;
    /** Each restored child's hostname step (never rejects), awaited before the fork returns or undoes itself. */
    const identities: Array<Promise<void>> = [];
    /** The disk copies made ahead of the restores (one after another), settled before the fork returns or undoes. */
    let copies: { byChild: Map<string, Promise<void>>; all: Promise<unknown> } = {
      byChild: new Map(),
      all: Promise.resolve(),
    };
    /** Aborted when the fork fails: the copies not started yet are not made. */
    const copiesStop = new AbortController();
    try {
      const point = await this.forkPoint(sandboxId, pointDir, timer);
      parentContinues = point.parentContinues;
      // Image encryption hook: an encrypted fork source is decrypted once (to a tmpfs) for all the children.
      const plain = await openImage(this.host.imageEncryption, point.source.imageDir, sandboxId);
      removePlainImage = () => plain.remove();
      const source = { ...point.source, imageDir: plain.dir };
      timer.mark('openImage');
      // A single child of a running parent takes the fork point's disk copy (a rename, not a second copy).
      const takeDisk = point.made && options.children.length === 1;
      if (!takeDisk) copies = this.copyDisksAhead(source, options, created, copiesStop.signal);
      const queue = [...options.children];
      const worker = async (): Promise<void> => {
        for (let child = queue.shift(); child !== undefined; child = queue.shift()) {
          if (options.signal?.aborted) throw abortError(options.signal);
          created.add(child.sandboxId);
          const childTimer = new StepTimer();
          const childOptions = {
            sandboxId: child.sandboxId,
            hostname: child.hostname,
            template: options.template,
            resources: options.resources,
            network: options.network,
            volumes: child.volumes ?? options.volumes,
            memory: true,
          };
          await this.steps.restorer.createFrom(source, childOptions, {
            timer: childTimer,
            takeDisk,
            diskCopied: copies.byChild.get(child.sandboxId),
            identities,
          });
          childSteps.push({ totalMs: childTimer.totalMs(), ...childTimer.stepsMs });
          crashPoint('fork:after-first-child');
        }
      };
      await Promise.all(Array.from({ length: Math.min(FORK_CONCURRENCY, options.children.length) }, worker));
      timer.mark('children');
      await Promise.all(identities);
      timer.mark('hostnames');
      await parentContinues;
      timer.mark('parentContinued');
      crashPoint('fork:after-children');
    } catch (error) {
      await parentContinues;
      await Promise.all(identities);
      copiesStop.abort();
      await copies.all;
      for (const id of created) await this.host.delete(id).catch(() => undefined);
      throw error;
    } finally {
      await Promise.all([dropAside(pointDir, paths.dir), removePlainImage()]);
      timer.mark('removePoint');
      this.host.info?.(
        { sandboxId, count: options.children.length, totalMs: timer.totalMs(), stepsMs: timer.stepsMs, childSteps },
        'fork steps',
      );
    }
  }

  /**
   * Copy the fork source's disk for every child, one copy after another, ahead of the restores: a child's worker
   * then waits only for its own copy, and the copies of later children are made while earlier ones restore (the
   * restores are CPU-bound, a sparse copy mostly waits on a `cp` process and the disk). Each child is added to
   * `created` before its directory is made, so an undone fork removes it. A failed or aborted copy fails its child
   * and every later one (their copies never start), as does `stop` (the fork failed) for the copies not begun.
   * @returns each child's copy (its worker awaits it) and the whole chain, which never rejects
   */
  private copyDisksAhead(
    source: StateLocation,
    options: ForkOptions,
    created: Set<string>,
    stop: AbortSignal,
  ): { byChild: Map<string, Promise<void>>; all: Promise<unknown> } {
    const byChild = new Map<string, Promise<void>>();
    let previous: Promise<void> = Promise.resolve();
    for (const child of options.children) {
      const paths = this.host.paths(child.sandboxId);
      const copied = previous.then(async () => {
        if (options.signal?.aborted) throw abortError(options.signal);
        if (stop.aborted) throw new RuntimeError('the fork failed before this child was copied');
        created.add(child.sandboxId);
        await mkdir(paths.dir, { recursive: true });
        await rm(paths.image, { force: true });
        await copySparse(source.diskPath, paths.image);
      });
      // Awaited by the child's worker; a rejection no worker reached (an earlier child failed) is not unhandled.
      copied.catch(() => undefined);
      byChild.set(child.sandboxId, copied);
      previous = copied;
    }
    return { byChild, all: previous.catch(() => undefined) };
  }

  /**
   * Where a fork's children are restored from. Paused parent: its pause image and disk, verified here. Running
   * parent: held still, checkpointed into `pointDir` with a copy of its disk, then let continue (`parentContinues`,
   * which never rejects: a failed `runsc resume` is logged, as before). `made` is true for a point made here (its
   * files belong to this fork), false for the paused parent's own image and disk (never written).
   * @throws CheckpointRejectedError when a paused parent's image or disk does not match its manifest
   */
  private async forkPoint(
    sandboxId: string,
    pointDir: string,
    timer: StepTimer,
  ): Promise<{ source: StateLocation; parentContinues: Promise<void>; made: boolean }> {
    const paths = this.host.paths(sandboxId);
    const pauseLocation = this.steps.pauseLocation(sandboxId);
    if ((await readManifest(pauseLocation)) !== null) {
      await verifyState(pauseLocation, {
        runtime: await this.steps.runtime(),
        memory: true,
        sandboxId,
        trustFingerprints: true,
      });
      timer.mark('verifyPauseImage');
      return { source: pauseLocation, parentContinues: Promise.resolve(), made: false };
    }
    const state = await this.host.runsc.state(sandboxId);
    if (state === null || (state.status !== 'running' && state.status !== 'paused')) {
      throw new RuntimeError(`sandbox ${sandboxId} is ${state?.status ?? 'missing'}; only a running sandbox forks`);
    }
    timer.mark('state');
    const source = snapshotLocation(pointDir);
    await mkdir(source.imageDir, { recursive: true });
    if (state.status === 'running') await this.steps.holdStill(sandboxId);
    timer.mark('holdStill');
    try {
      await this.steps.checkpoint(sandboxId, source.imageDir, state.pid);
      timer.mark('checkpoint');
      crashPoint('fork:after-checkpoint');
      await flushDisk(paths.rootfs, paths.diskDir);
      timer.mark('syncDisk');
      await copySparse(paths.image, source.diskPath);
      timer.mark('copyDisk');
    } catch (error) {
      await this.steps.letContinue(sandboxId);
      throw error;
    }
    return { source, parentContinues: this.steps.letContinue(sandboxId), made: true };
  }
}
