import { mkdir, open, readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import {
  type CheckpointInfo,
  CheckpointRejectedError,
  type CreateFromSnapshotOptions,
  type CreateOptions,
  crashPoint,
  type ForkOptions,
  RuntimeError,
  type SnapshotOptions,
} from '@burrow/runtime';
import { checkpointRefusal } from './checkpoint-blockers.js';
import {
  allocatedBytes,
  type CheckpointManifest,
  completeChecksums,
  copySparse,
  type RuntimeIdentity,
  readManifest,
  resealDisk,
  type StateLocation,
  snapshotLocation,
  verifyState,
  writeManifest,
} from './checkpoint-files.js';
import { type CheckpointHost, StepTimer } from './checkpoint-host.js';
import {
  dropSpentImage,
  flushDisk,
  killAndWait,
  linkOrCopyDir,
  SPENT_PREFIX,
  unmountStrict,
  waitForDiskRelease,
} from './checkpoint-host-steps.js';
import { GvisorForker } from './gvisor-fork.js';
import { GvisorRestorer } from './gvisor-restore.js';
import { mountsUnder, processAlive } from './host-plumbing.js';
import { abortError, tail } from './run-command.js';

/**
 * File in a pause image's directory, present from just before a resume mounts the verified disk until the image is
 * dropped after the restore: a resume that finds it knows the disk was changed by that mount alone.
 */
const RESUME_MOUNTED_MARK = 'resume-mounted';

/** Write `text` to `path` and fsync it, so the file outlasts a crash of the machine as well as of the process. */
async function writeFileDurably(path: string, text: string): Promise<void> {
  const handle = await open(path, 'w');
  try {
    await handle.writeFile(text);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * Pause, resume, stop, fork and snapshots on gVisor. The measured recipe (docs/adr/0002): `runsc pause` →
 * `checkpoint --leave-running --compression=none --direct` → SIGKILL the sentry, so a failed checkpoint never
 * kills the sandbox and nothing runs between the checkpoint and the end; then unmount so the disk is frozen with
 * the image. Resume verifies checksums, mounts again and `restore --direct`s into the same id.
 */
export class GvisorCheckpointer {
  private runtimeIdentity: RuntimeIdentity | null = null;
  /** Container teardowns still finishing after a pause (runsc waits for the dead sentry to be reaped). */
  private readonly releasing = new Map<string, Promise<void>>();
  /** Checksums of pause images being taken in the background after their pause answered. */
  private readonly checksumming = new Map<string, { controller: AbortController; done: Promise<void> }>();
  /** When this checkpointer (and its driver) came up, ms since the epoch: older runsc records are a crash's. */
  private readonly startedAtMs = Date.now();

  private readonly restorer: GvisorRestorer;
  private readonly forker: GvisorForker;

  constructor(private readonly host: CheckpointHost) {
    this.restorer = new GvisorRestorer(host);
    this.forker = new GvisorForker({
      host,
      restorer: this.restorer,
      pauseLocation: (id) => this.pauseLocation(id),
      runtime: () => this.runtime(),
      holdStill: (id) => this.mustRunsc(['pause', id], 'pause'),
      checkpoint: (id, imageDir, sentryPid) => this.checkpoint(id, imageDir, sentryPid),
      letContinue: (id) => this.letContinue(id),
    });
  }

  /** Where the pause state of a sandbox lives. */
  pauseLocation(sandboxId: string): StateLocation {
    const paths = this.host.paths(sandboxId);
    return {
      imageDir: join(paths.checkpointDir, 'image'),
      diskPath: paths.image,
      manifestPath: join(paths.checkpointDir, 'manifest.json'),
    };
  }

  /** Whether a complete pause image is on the host. */
  async isPaused(sandboxId: string): Promise<boolean> {
    return (await readManifest(this.pauseLocation(sandboxId)).catch(() => null)) !== null;
  }

  async runtime(): Promise<RuntimeIdentity> {
    if (this.runtimeIdentity === null) {
      const result = await this.host.runsc.run(['--version']);
      const line = result.stdout.split('\n')[0]?.trim() ?? '';
      if (result.exitCode !== 0 || line === '') throw new RuntimeError('runsc --version failed', result.stderr);
      this.runtimeIdentity = { runscVersion: line, platform: this.host.runsc.platform };
    }
    return this.runtimeIdentity;
  }

  async pause(sandboxId: string, signal?: AbortSignal): Promise<CheckpointInfo> {
    const timer = new StepTimer();
    const location = this.pauseLocation(sandboxId);
    const paths = this.host.paths(sandboxId);
    // Only a leftover of an earlier pause image can be checksummed now; none may write a manifest during this one.
    await this.stopChecksums(sandboxId);
    const done = await readManifest(location);
    if (done !== null) {
      await this.releaseContainer(sandboxId);
      if (done.checksumsPending === true) this.startChecksums(sandboxId);
      return this.info(done, location);
    }
    const state = await this.host.runsc.state(sandboxId);
    const imageComplete = (await readdir(location.imageDir).catch(() => [] as string[])).includes('checkpoint.img');
    const sentryGone = state === null || state.status === 'stopped' || !(await processAlive(state.pid));
    if (sentryGone && imageComplete) {
      // A crash after the checkpoint succeeded and the sentry was killed (runsc still says `paused` for a container
      // it held still, whatever became of its sentry): finish the pause.
      await this.releaseContainer(sandboxId);
      return this.info(await this.seal(sandboxId, location), location);
    }
    if (state === null || sentryGone || (state.status !== 'running' && state.status !== 'paused')) {
      throw new RuntimeError(`sandbox ${sandboxId} is ${state?.status ?? 'missing'}; only a running sandbox pauses`);
    }
    if (signal?.aborted) throw abortError(signal);
    timer.mark('state');
    if (state.status === 'running') await this.mustRunsc(['pause', sandboxId], 'pause');
    timer.mark('holdStill');
    await rm(paths.checkpointDir, { recursive: true, force: true });
    await mkdir(location.imageDir, { recursive: true });
    try {
      await this.checkpoint(sandboxId, location.imageDir, state.pid);
    } catch (error) {
      await this.host.runsc.run(['resume', sandboxId]);
      await rm(paths.checkpointDir, { recursive: true, force: true });
      throw error;
    }
    timer.mark('checkpoint');
    crashPoint('pause:after-checkpoint');
    // Nothing may run between the checkpoint and the end of the sentry: the disk must match the image. The sandbox
    // is held still, so the host's overlay and disk mounts are undone while the sentry dies (they never froze
    // anything: the disk is frozen once the gofer has exited and the loop device is gone, in releaseContainer).
    await Promise.all([killAndWait(state.pid), unmountStrict(paths.rootfs, paths.diskDir)]);
    timer.mark('killAndUnmount');
    crashPoint('pause:after-kill');
    await this.releaseContainer(sandboxId, { wait: false, timer });
    // Sealed with fingerprints (inode, size, mtime, ctime) now, checksummed in the background: a local resume checks
    // the fingerprints, anything else waits for or refuses without the checksums (docs/adr/0002). Hashing here
    // costs 30–60 ms of an idle pause and 0.7–1.1 s of a 512 MiB one (the O_DIRECT image is read back from disk).
    const sealed = await writeManifest(location, {
      sandboxId,
      runtime: await this.runtime(),
      memory: true,
      deferChecksums: true,
    });
    timer.mark('seal');
    this.startChecksums(sandboxId);
    this.host.info?.({ sandboxId, totalMs: timer.totalMs(), stepsMs: timer.stepsMs }, 'pause steps');
    crashPoint('pause:after-seal');
    return this.info(sealed, location);
  }

  async resume(options: CreateOptions): Promise<void> {
    const { sandboxId } = options;
    const location = this.pauseLocation(sandboxId);
    const paths = this.host.paths(sandboxId);
    const timer = new StepTimer();
    await this.releasing.get(sandboxId);
    // Checksums still being taken are not needed by this resume (it checks fingerprints) and the image is spent after.
    await this.stopChecksums(sandboxId);
    timer.mark('waitTeardownAfterPause');
    const known = await this.containerKnown(sandboxId);
    const state = known ? await this.host.runsc.state(sandboxId) : null;
    if (state?.status === 'running') {
      // A crash after the restore: the image is spent; what the crash may have cut short after the restore (the
      // CPU limit, the OOM preferences) is done again.
      await this.host.started(sandboxId, state.pid, options.resources.cpuCount);
      await rm(paths.checkpointDir, { recursive: true, force: true });
      return;
    }
    timer.mark('state');
    const mountedMark = join(paths.checkpointDir, RESUME_MOUNTED_MARK);
    if (
      await stat(mountedMark).then(
        () => true,
        () => false,
      )
    ) {
      // A resume that verified this image mounted its disk and ended before `runsc restore` took it: the mount alone
      // rewrote the disk's superblock (mount time and count), so the disk is sealed again once it is unmounted.
      await this.releaseContainer(sandboxId);
      await resealDisk(location);
      await rm(mountedMark, { force: true });
      timer.mark('resealAfterCrash');
    }
    await verifyState(location, { runtime: await this.runtime(), memory: true, sandboxId, trustFingerprints: true });
    timer.mark('verify');
    // A pause released everything; only a crashed or failed step leaves a container or a mount to clear first.
    if (known || (await mountsUnder(paths.dir)).length > 0) await this.releaseContainer(sandboxId);
    timer.mark('releaseLeftovers');
    crashPoint('resume:before-restore');
    // Written durably before the disk is mounted; the image (and this mark with it) is dropped once restored.
    await writeFileDurably(mountedMark, `${new Date().toISOString()}\n`);
    try {
      await this.restorer.restoreInto(options, location.imageDir, timer);
    } catch (error) {
      await this.resealAfterFailedRestore(sandboxId, location);
      throw error;
    }
    crashPoint('resume:after-restore');
    await dropSpentImage(paths);
    timer.mark('dropImage');
    this.host.info?.({ sandboxId, totalMs: timer.totalMs(), stepsMs: timer.stepsMs }, 'resume steps');
  }

  async stop(sandboxId: string): Promise<void> {
    await this.stopChecksums(sandboxId);
    const paths = this.host.paths(sandboxId);
    const state = await this.host.runsc.state(sandboxId);
    if (state !== null && state.pid > 0 && state.status !== 'stopped') await killAndWait(state.pid);
    await this.releaseContainer(sandboxId);
    await rm(paths.checkpointDir, { recursive: true, force: true });
  }

  async snapshot(sandboxId: string, options: SnapshotOptions): Promise<CheckpointInfo> {
    const target = snapshotLocation(options.targetDir);
    const paths = this.host.paths(sandboxId);
    await mkdir(options.targetDir, { recursive: true });
    if ((await readdir(options.targetDir)).length > 0) {
      throw new RuntimeError(`snapshot target ${options.targetDir} is not empty`);
    }
    try {
      let paused = await readManifest(this.pauseLocation(sandboxId));
      if (paused?.checksumsPending === true && options.memory) {
        // The snapshot carries the pause image's checksums: take them now if the background has not.
        await this.stopChecksums(sandboxId);
        if ((await completeChecksums(this.pauseLocation(sandboxId))) === 'changed') {
          throw new CheckpointRejectedError(
            `the pause image of ${sandboxId} was changed after the pause, before its checksums were taken; ` +
              'it is not copied into a snapshot',
          );
        }
        paused = await readManifest(this.pauseLocation(sandboxId));
      }
      if (paused !== null) {
        if (options.memory) await linkOrCopyDir(this.pauseLocation(sandboxId).imageDir, target.imageDir);
        await copySparse(paths.image, target.diskPath);
        const image = options.memory ? paused.image : [];
        return this.info(await this.sealAt(sandboxId, target, options.memory, image), target);
      }
      const state = await this.host.runsc.state(sandboxId);
      if (state === null || state.status === 'stopped') {
        if (options.memory) throw new RuntimeError(`sandbox ${sandboxId} does not run: no memory to snapshot`);
        await copySparse(paths.image, target.diskPath);
        return this.info(await this.sealAt(sandboxId, target, false), target);
      }
      await this.holdStill(sandboxId, state.status, async () => {
        if (options.memory) {
          await mkdir(target.imageDir, { recursive: true });
          await this.checkpoint(sandboxId, target.imageDir, state.pid);
          crashPoint('snapshot:after-checkpoint');
        }
        await flushDisk(paths.rootfs, paths.diskDir);
        await copySparse(paths.image, target.diskPath);
      });
      return this.info(await this.sealAt(sandboxId, target, options.memory), target);
    } catch (error) {
      await rm(options.targetDir, { recursive: true, force: true });
      throw error;
    }
  }

  async createFromSnapshot(options: CreateFromSnapshotOptions): Promise<void> {
    const source = snapshotLocation(options.sourceDir);
    await verifyState(source, { runtime: await this.runtime(), memory: options.memory });
    await this.restorer.createFrom(source, options);
  }

  /** Fork `sandboxId` into `options.children` (see {@link GvisorForker.fork}). */
  fork(sandboxId: string, options: ForkOptions): Promise<void> {
    return this.forker.fork(sandboxId, options);
  }

  /** `runsc resume` of a container held still; a failure is logged (the sandbox stays held still). */
  private async letContinue(sandboxId: string): Promise<void> {
    const resumed = await this.host.runsc.run(['resume', sandboxId]).catch((error: unknown) => ({
      exitCode: null,
      stderr: String(error),
    }));
    if (resumed.exitCode !== 0) this.host.warn({ sandboxId, stderr: resumed.stderr }, 'runsc resume failed');
  }

  async settle(sandboxId: string): Promise<void> {
    const paths = this.host.paths(sandboxId);
    await this.host.imageEncryption?.clear(sandboxId); // image encryption hook: plaintext a crash left on the tmpfs
    const entries = await readdir(paths.dir).catch(() => [] as string[]);
    for (const name of entries) {
      if (name.startsWith('fork-') || name.startsWith(SPENT_PREFIX)) {
        await rm(join(paths.dir, name), { recursive: true, force: true });
      }
    }
    const paused = await readManifest(this.pauseLocation(sandboxId)).catch(() => null);
    const state = await this.host.runsc.state(sandboxId);
    if (paused !== null) {
      // A live sentry with a sealed image: a restore finished and a crash came before the spent image was dropped.
      if (state?.status === 'running' || state?.status === 'paused') {
        await dropSpentImage(paths);
        return;
      }
      // A pause returns before its container record and cgroups are gone (background teardown); a crash right
      // after it leaves them behind (reproduced by the chaos test). Releasing again is idempotent.
      await this.releaseContainer(sandboxId);
      // A crash (or a restart) before the background checksums were written: take them again.
      if (paused.checksumsPending === true) this.startChecksums(sandboxId);
      return;
    }
    if (paused === null && state?.status === 'created' && (await this.recordedBeforeStart(sandboxId))) {
      // `runsc create` done, `runsc start` not: a crash in between (reproduced by chaos seed 1557491096, a start
      // killed 182 ms in). Nothing ran in it; released, the sandbox shows stopped and its start is done again from there. Only
      // records older than this process: a create of this process may be between the two steps right now.
      if (state.pid > 0) await killAndWait(state.pid);
      await this.releaseContainer(sandboxId);
      return;
    }
    if (paused === null && state?.status === 'paused') {
      // Held still by a fork or snapshot that a crash interrupted (a pause would have left an image or killed it).
      const imageStarted = await stat(paths.checkpointDir).then(
        () => true,
        () => false,
      );
      if (!imageStarted) await this.host.runsc.run(['resume', sandboxId]);
    }
  }

  /**
   * After a restore that failed and undid itself: the disk was verified just before and only mounted and unmounted
   * since (ext4 rewrites its superblock's mount times), so its checksum is taken again and a retry can restore the
   * image. Without this, one failed `runsc restore` (initFromOptions: bad file number, which happens under load)
   * leaves the image refused as "altered" forever and the sandbox's memory lost. Skipped while anything of it is
   * still mounted.
   */
  private async resealAfterFailedRestore(sandboxId: string, location: StateLocation): Promise<void> {
    try {
      if ((await mountsUnder(this.host.paths(sandboxId).dir)).length > 0) return;
      await resealDisk(location);
    } catch (error) {
      this.host.warn({ sandboxId, err: error }, 'sealing the disk again after a failed restore failed');
    }
  }

  /** Hold a running container still (runsc pause) while `step` runs, then let it continue. */
  private async holdStill(sandboxId: string, status: string, step: () => Promise<void>): Promise<void> {
    if (status === 'running') await this.mustRunsc(['pause', sandboxId], 'pause');
    try {
      await step();
    } finally {
      await this.letContinue(sandboxId);
    }
  }

  /** Unmount (freezing the disk), then drop the container and cgroups; with `wait: false` the runsc teardown finishes in the background. */
  private async releaseContainer(
    sandboxId: string,
    options: { wait?: boolean; timer?: StepTimer } = {},
  ): Promise<void> {
    const paths = this.host.paths(sandboxId);
    const pending = this.releasing.get(sandboxId);
    if (pending) await pending;
    await unmountStrict(paths.rootfs, paths.diskDir);
    options.timer?.mark('unmount');
    await waitForDiskRelease(paths.dir);
    options.timer?.mark('waitDiskRelease');
    const teardown = (async () => {
      if ((await this.containerKnown(sandboxId)) && !(await this.host.runsc.forgetExited(sandboxId))) {
        await this.host.runsc.run(['delete', '-force', sandboxId]);
      }
      await this.host.removeCgroups(sandboxId);
    })();
    if (options.wait === false) {
      const tracked = teardown
        .catch((error: unknown) => this.host.warn({ sandboxId, err: error }, 'container teardown after pause failed'))
        .finally(() => this.releasing.delete(sandboxId));
      this.releasing.set(sandboxId, tracked);
      return;
    }
    await teardown;
  }

  /** Whether runsc last wrote the container's record before this process came up. */
  private async recordedBeforeStart(sandboxId: string): Promise<boolean> {
    const file = join(this.host.runsc.stateDir, `${sandboxId}_sandbox:${sandboxId}.state`);
    const st = await stat(file).catch(() => null);
    return st !== null && st.mtimeMs < this.startedAtMs;
  }

  /** Whether runsc has a state file for the container (a stat, where `runsc state` costs 50-150 ms here). */
  private async containerKnown(sandboxId: string): Promise<boolean> {
    const file = join(this.host.runsc.stateDir, `${sandboxId}_sandbox:${sandboxId}.state`);
    return stat(file).then(
      () => true,
      () => false,
    );
  }

  /**
   * Wait for the background teardown of `sandboxId` after a pause, if one runs, and stop its background checksums
   * (before its directory is removed).
   */
  async released(sandboxId: string): Promise<void> {
    await this.releasing.get(sandboxId);
    await this.stopChecksums(sandboxId);
  }

  /** Wait until the background checksums of `sandboxId`'s pause image are written (or found impossible), if any run. */
  async checksummed(sandboxId: string): Promise<void> {
    await this.checksumming.get(sandboxId)?.done;
  }

  /** Take the pending checksums of `sandboxId`'s pause image in the background (once at a time). */
  private startChecksums(sandboxId: string): void {
    if (this.checksumming.has(sandboxId)) return;
    const controller = new AbortController();
    const entry = {
      controller,
      done: completeChecksums(this.pauseLocation(sandboxId), controller.signal).then(
        (result) => {
          if (result === 'changed') {
            this.host.warn({ sandboxId }, 'the pause image changed before its checksums were taken; it is refused');
          }
        },
        (error: unknown) => {
          if (!controller.signal.aborted) {
            this.host.warn({ sandboxId, err: error }, 'taking the checksums of a pause image failed');
          }
        },
      ),
    };
    this.checksumming.set(sandboxId, entry);
    void entry.done.finally(() => {
      if (this.checksumming.get(sandboxId) === entry) this.checksumming.delete(sandboxId);
    });
  }

  /** Abort the background checksums of `sandboxId` and wait until they have stopped (the manifest is left pending). */
  private async stopChecksums(sandboxId: string): Promise<void> {
    const entry = this.checksumming.get(sandboxId);
    if (entry === undefined) return;
    entry.controller.abort();
    await entry.done;
  }

  private async seal(sandboxId: string, location: StateLocation): Promise<CheckpointManifest> {
    return this.sealAt(sandboxId, location, true);
  }

  private async sealAt(
    sandboxId: string,
    location: StateLocation,
    memory: boolean,
    image?: CheckpointManifest['image'],
  ): Promise<CheckpointManifest> {
    return writeManifest(location, {
      sandboxId,
      runtime: await this.runtime(),
      memory,
      ...(image === undefined ? {} : { image }),
    });
  }

  private async info(manifest: CheckpointManifest, location: StateLocation): Promise<CheckpointInfo> {
    return {
      imageSizeBytes: manifest.image.reduce((sum, f) => sum + f.sizeBytes, 0),
      diskSizeBytes: await allocatedBytes(location.diskPath).catch(() => manifest.diskAllocatedBytes),
      runtimeVersion: `${manifest.runscVersion} ${manifest.platform}`,
    };
  }

  /**
   * {@link runscCheckpoint} into `imageDir`; encrypted when image encryption is on (image-encryption.ts: runsc
   * writes to a tmpfs, encrypted into `imageDir` while the sandbox is still held still).
   */
  private async checkpoint(sandboxId: string, imageDir: string, sentryPid: number): Promise<void> {
    const encryption = this.host.imageEncryption;
    if (encryption === undefined) return this.runscCheckpoint(sandboxId, imageDir, sentryPid);
    await encryption.checkpointInto(sandboxId, imageDir, (plainDir) =>
      this.runscCheckpoint(sandboxId, plainDir, sentryPid),
    );
  }

  /**
   * `runsc checkpoint --leave-running` into `imageDir` (uncompressed, O_DIRECT). The sandbox keeps running when it
   * fails; the caller releases what it held still.
   * An image taken while the sandbox's gofer was gone (it exited before or during the checkpoint) is refused: it
   * saves a sandbox that can open no file, whose restore stops right after it: the pause answers ok and every
   * resume fails "stopped right after restore" (reproduced by chaos seed 149856408, a gofer killed ~90 ms into a
   * pause).
   * @param sentryPid the sandbox's sentry (runsc `state` pid), to find its gofer
   * @throws HostSocketOpenError when a process in the sandbox holds a host socket (gVisor saves no host fd)
   * @throws DeletedFileOpenError when a process holds a deleted disk file or works in a deleted directory
   * @throws RuntimeError when the gofer is gone, and for any other failure
   */
  private async runscCheckpoint(sandboxId: string, imageDir: string, sentryPid: number): Promise<void> {
    const result = await this.host.runsc.run(
      ['checkpoint', '--leave-running', '--compression=none', '--direct', `--image-path=${imageDir}`, sandboxId],
      { timeoutMs: 600_000 },
    );
    if (result.exitCode === 0) {
      if (await this.host.goferGone(sandboxId, sentryPid)) {
        throw new RuntimeError(
          `checkpoint of ${sandboxId} refused: its file server (gVisor gofer) exited, so the saved sandbox could open ` +
            'no file; start it again (its disk is kept) or delete it',
        );
      }
      return;
    }
    const refusal = checkpointRefusal(sandboxId, result.stderr);
    if (refusal !== null) throw refusal;
    throw new RuntimeError(`checkpoint of ${sandboxId} failed; it keeps running`, tail(result.stderr, 10));
  }

  private async mustRunsc(args: string[], step: string): Promise<void> {
    const result = await this.host.runsc.run(args);
    if (result.exitCode !== 0) {
      throw new RuntimeError(`runsc ${step} failed (exit ${result.exitCode ?? result.signal})`, tail(result.stderr));
    }
  }
}
