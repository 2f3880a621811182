import { randomBytes } from 'node:crypto';
import { link, mkdir, readdir, readFile, rename, rm, stat } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
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
  type SpawnOptions,
} from '@burrow/runtime';
import { AGENT_GUEST_BINARY } from './agent-binary.js';
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
  verifyState,
  writeManifest,
} from './checkpoint-files.js';
import { HOSTNAME_PATTERN } from './guest-identity-files.js';
import { loopDevicesUnder, mountsUnder, mustRun, preferStubsForOomKill, processAlive } from './host-plumbing.js';
import { type ImageEncryption, openImage } from './image-encryption.js';
import { abortError, runCommand, tail } from './run-command.js';
import type { RunscCli } from './runsc-cli.js';

/** Undo steps of a half-done operation, run in reverse. */
type UndoList = Array<() => Promise<void>>;

/** What the checkpointer needs from the driver. */
export interface CheckpointHost {
  readonly runsc: RunscCli;
  /** Encrypts images at rest (image-encryption.ts). @default off: images are plaintext */
  readonly imageEncryption?: ImageEncryption | undefined;
  paths(sandboxId: string): { dir: string; image: string; diskDir: string; rootfs: string; checkpointDir: string };
  /** Mount disk and overlay and write the bundle; pushes undo steps. */
  prepareBundle(options: CreateOptions, made: UndoList): Promise<void>;
  /** Run a runsc step whose output goes to the sandbox's logs. @throws RuntimeError with the log tail */
  runscStep(sandboxId: string, args: string[], step: string, signal: AbortSignal | undefined): Promise<void>;
  /** After a container runs again: its CPU limit (`cpuCount` CPUs), OOM preferences, counters. */
  started(sandboxId: string, sentryPid: number, cpuCount: number): Promise<void>;
  /** Remove the sandbox's cgroup directories. */
  removeCgroups(sandboxId: string): Promise<void>;
  /** Whether the gofer of the running sandbox whose sentry is `sentryPid` has exited (false when it cannot tell). */
  goferGone(sandboxId: string, sentryPid: number): Promise<boolean>;
  /** Create and start a fresh container on the sandbox's (existing) disk. */
  create(options: CreateOptions): Promise<void>;
  /** Remove every host resource of a sandbox. */
  delete(sandboxId: string): Promise<void>;
  warn(object: object, message: string): void;
  /** Step timings of pause and resume (info level). @default not logged */
  info?(object: object, message: string): void;
}

/** Milliseconds spent in each named step of one operation, for the log line that explains where the time went. */
class StepTimer {
  private last = performance.now();
  private readonly start = this.last;
  readonly stepsMs: Record<string, number> = {};

  /** Close the step that ends now under `name`. */
  mark(name: string): void {
    const now = performance.now();
    this.stepsMs[name] = Math.round((now - this.last) * 10) / 10;
    this.last = now;
  }

  totalMs(): number {
    return Math.round(performance.now() - this.start);
  }
}

/** FIFO inside the sandbox (on gVisor's own /dev tmpfs) that the init-side spawner reads requests from. */
export const SPAWN_FIFO = '/dev/.burrow-spawn';

/**
 * The container's init command under tini: a shell that starts each line written to {@link SPAWN_FIFO} as a
 * detached session. gVisor kills every process descended from `runsc exec` when it restores an image (their
 * caller is gone), so processes that must survive pause, resume and fork are started from the init's tree.
 */
export const SPAWNER_ARGV = [
  '/bin/sh',
  '-c',
  // The exec agent (docs/adr/0003) runs from the init too, restarted if it ends.
  `a=${AGENT_GUEST_BINARY}; if [ -x $a ]; then (while :; do $a; sleep 1; done) </dev/null >/dev/null 2>&1 & fi; ` +
    // The FIFO is held open read-write (fd 3) for the spawner's life. Reopening it after each writer's EOF lost
    // requests: a writer that opened it while the old read end was still open had its line dropped with that pipe
    // when the read end closed (the server then never started; the "rare hang" of issue 3).
    `f=${SPAWN_FIFO}; rm -f $f; mkfifo -m 600 $f; exec 3<>$f; while IFS= read -r line <&3; do ` +
    'setsid /bin/sh -c "$line" </dev/null >/dev/null 2>&1 3>&- & done',
];

/**
 * Largest `pages.img` restored without `--direct`, bytes. Measured in session 5 (driver probe, idle sandbox of
 * 1 GiB, restores alternating with and without the flag, load ~8): its 1.3 MB pages file (tini, two shells, the
 * agent; a bare `sleep` image has 0.2 MB) spent 19–71 ms in runsc's "Memory files load" with `--direct` (the
 * whole `runsc restore` 440–640 ms, median 499) and 10–20 ms without (386–459 ms, median 407): O_DIRECT reads every
 * saved range from the device, while a small image is read through the page cache (the pause's background
 * checksums have usually just read it). Big images keep `--direct`: a 1 GB image not in the page cache restored
 * in 1.89 s without it against 0.73 s with it (research probe-gvisor-2024 §5.3).
 */
export const RESTORE_BUFFERED_MAX_BYTES = 32 * 1024 * 1024;

/**
 * The read flags of a `runsc restore` of `imageDir`: `['--direct']`, or `[]` when its `pages.img` is at most
 * {@link RESTORE_BUFFERED_MAX_BYTES}. Exported so the bench's raw baseline restores by the same rule.
 */
export async function restoreReadFlags(imageDir: string): Promise<string[]> {
  const pages = await stat(join(imageDir, 'pages.img')).catch(() => null);
  return pages !== null && pages.size <= RESTORE_BUFFERED_MAX_BYTES ? [] : ['--direct'];
}

/** How long a spawn request waits for the spawner's FIFO to appear (a request right after create), in ms. */
export const SPAWNER_READY_TIMEOUT_MS = 10_000;

/**
 * The argv (run with `runsc exec`) that asks the spawner to start `options.argv` in `cwd` with exactly `env`.
 * The request waits (at most {@link SPAWNER_READY_TIMEOUT_MS}) until the FIFO exists and writes only to a FIFO:
 * a request made right after create can run before the init has made it, and writing then created a regular
 * file there; the init's `mkfifo` failed, its loop read that file to its end and exited, and the whole sandbox
 * stopped (the "cannot exec in sandbox" of the first exec after create; runsc-boot.log: the application exits 0
 * right after the spawn request, init.log: `mkfifo: ... File exists`).
 */
export function spawnRequestArgv(options: SpawnOptions): string[] {
  const env = Object.entries(options.env).map(([k, v]) => shellQuote(`${k}=${v}`));
  const line = `cd ${shellQuote(options.cwd)} && exec env -i ${env.join(' ')} ${options.argv.map(shellQuote).join(' ')}`;
  if (line.includes('\n')) throw new RuntimeError('a spawned command may not contain a newline');
  const tries = Math.ceil(SPAWNER_READY_TIMEOUT_MS / 20);
  const script =
    `f=${SPAWN_FIFO}; i=0; while [ ! -p $f ]; do i=$((i+1)); ` +
    `if [ $i -gt ${tries} ]; then echo "the sandbox's spawner is not running ($f is not a FIFO)" >&2; exit 1; fi; ` +
    `sleep 0.02; done; printf '%s\\n' "$1" > $f`;
  return ['/bin/sh', '-c', script, 'spawn', line];
}

function shellQuote(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

/**
 * Most children restored at once by a fork: restores are CPU-bound in runsc, so one per core (at least 2: a
 * child's copy, mount and hostname exec wait on I/O and processes, not on the CPU).
 */
const FORK_CONCURRENCY = Math.max(2, availableParallelism());

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

  constructor(private readonly host: CheckpointHost) {}

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
    // cost 30–60 ms of an idle pause and 0.7–1.1 s of a 512 MiB one (the O_DIRECT image is read back from disk).
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
    await verifyState(location, { runtime: await this.runtime(), memory: true, sandboxId, trustFingerprints: true });
    timer.mark('verify');
    // A pause released everything; only a crashed or failed step leaves a container or a mount to clear first.
    if (known || (await mountsUnder(paths.dir)).length > 0) await this.releaseContainer(sandboxId);
    timer.mark('releaseLeftovers');
    crashPoint('resume:before-restore');
    try {
      await this.restoreInto(options, location.imageDir, timer);
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
    await this.createFrom(source, options);
  }

  /**
   * {@link createFromSnapshot} from a state `source` the caller verified (or made itself, just now).
   * @param fork.takeDisk move `source`'s disk image instead of copying it: only for a fork point of this call with
   *   a single child (nothing else reads that disk, and the point is removed after)
   * @param fork.diskCopied the child's disk copy made ahead by the fork (see {@link copyDisksAhead}): awaited
   *   instead of copying here
   * @param fork.identities a fork's list of pending identity steps: the child's hostname `runsc exec` is pushed
   *   there (it never rejects) instead of being awaited, so the fork's next restore starts meanwhile; the fork
   *   awaits them
   */
  private async createFrom(
    source: StateLocation,
    options: Omit<CreateFromSnapshotOptions, 'sourceDir'>,
    fork: {
      timer?: StepTimer;
      takeDisk?: boolean;
      diskCopied?: Promise<void> | undefined;
      identities?: Array<Promise<void>>;
    } = {},
  ): Promise<void> {
    const { timer, identities } = fork;
    const paths = this.host.paths(options.sandboxId);
    if ((await this.host.runsc.state(options.sandboxId))?.status === 'running') return;
    const made: UndoList = [];
    try {
      const existed = await stat(paths.dir).then(
        () => true,
        () => false,
      );
      if (!existed) made.push(() => this.host.delete(options.sandboxId));
      if (fork.diskCopied !== undefined) {
        await fork.diskCopied;
        timer?.mark('waitDiskCopy');
      } else {
        await mkdir(paths.dir, { recursive: true });
        await rm(paths.image, { force: true });
        if (fork.takeDisk === true) await moveFile(source.diskPath, paths.image);
        else await copySparse(source.diskPath, paths.image);
        timer?.mark(fork.takeDisk === true ? 'moveDisk' : 'copyDisk');
      }
      if (options.memory && identities !== undefined) {
        // The hostname `runsc exec` (a whole runsc CLI start, 150–400 ms under load) starts with the OOM preference
        // walk, as below, but is not awaited here: the fork restores its next child meanwhile and awaits it before
        // it returns. A stub process it adds is marked for the OOM killer after it (as after a `runsc exec`).
        let hostname: Promise<void> = Promise.resolve();
        const sentryPid = await this.restoreInto(options, source.imageDir, timer, async () => {
          hostname = this.setHostname(options.sandboxId, options.hostname).catch((error: unknown) => {
            this.host.warn({ sandboxId: options.sandboxId, err: error }, 'setting the hostname of a fork failed');
          });
        });
        identities.push(hostname.then(() => preferStubsForOomKill(sentryPid).catch(() => undefined)));
      } else if (options.memory) {
        // The hostname `runsc exec` (a whole runsc CLI start, 65–230 ms) runs while the OOM preferences are set.
        await this.restoreInto(options, source.imageDir, timer, () =>
          this.setHostname(options.sandboxId, options.hostname),
        );
      } else {
        await this.host.create(options);
      }
    } catch (error) {
      for (const undo of made.reverse()) await undo().catch(() => undefined);
      throw error;
    }
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
            memory: true,
          };
          await this.createFrom(source, childOptions, {
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
    const pauseLocation = this.pauseLocation(sandboxId);
    if ((await readManifest(pauseLocation)) !== null) {
      await verifyState(pauseLocation, {
        runtime: await this.runtime(),
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
    if (state.status === 'running') await this.mustRunsc(['pause', sandboxId], 'pause');
    timer.mark('holdStill');
    try {
      await this.checkpoint(sandboxId, source.imageDir, state.pid);
      timer.mark('checkpoint');
      crashPoint('fork:after-checkpoint');
      await flushDisk(paths.rootfs, paths.diskDir);
      timer.mark('syncDisk');
      await copySparse(paths.image, source.diskPath);
      timer.mark('copyDisk');
    } catch (error) {
      await this.letContinue(sandboxId);
      throw error;
    }
    return { source, parentContinues: this.letContinue(sandboxId), made: true };
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
      // after it left them behind (found by the chaos test). Releasing again is idempotent.
      await this.releaseContainer(sandboxId);
      // A crash (or a restart) before the background checksums were written: take them again.
      if (paused.checksumsPending === true) this.startChecksums(sandboxId);
      return;
    }
    if (paused === null && state?.status === 'created' && (await this.recordedBeforeStart(sandboxId))) {
      // `runsc create` done, `runsc start` not: a crash in between (chaos seed 1557491096: a start killed 182 ms
      // in). Nothing ran in it; released, the sandbox shows stopped and its start is done again from there. Only
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
   * image. Before, one failed `runsc restore` (initFromOptions: bad file number, seen under load) left the image
   * refused as "altered" forever and the sandbox's memory lost. Skipped while anything of it is still mounted.
   */
  private async resealAfterFailedRestore(sandboxId: string, location: StateLocation): Promise<void> {
    try {
      if ((await mountsUnder(this.host.paths(sandboxId).dir)).length > 0) return;
      await resealDisk(location);
    } catch (error) {
      this.host.warn({ sandboxId, err: error }, 'sealing the disk again after a failed restore failed');
    }
  }

  /**
   * Restore an image into a fresh container of `options.sandboxId` on its mounted disk; undoes itself on failure.
   * @param alongside run once the container runs, concurrently with the host's `started` step (a fork child's
   *   hostname); the stubs it may add are marked for the OOM killer again afterwards, in the background
   * @returns the host pid of the restored sandbox's sentry
   */
  private async restoreInto(
    options: CreateOptions,
    imageDir: string,
    timer?: StepTimer,
    alongside?: () => Promise<void>,
  ): Promise<number> {
    const { sandboxId } = options;
    const paths = this.host.paths(sandboxId);
    const made: UndoList = [];
    // --- image encryption hook: runsc reads a plaintext copy on a tmpfs, removed once the restore is done.
    const plain = await openImage(this.host.imageEncryption, imageDir, sandboxId);
    made.push(() => plain.remove());
    timer?.mark('openImage');
    // --- end image encryption hook
    try {
      if ((await stat(paths.image).catch(() => null)) === null) {
        throw new RuntimeError(`the disk of ${sandboxId} is missing; it cannot be restored`);
      }
      await this.host.prepareBundle(options, made);
      timer?.mark('mountAndBundle');
      made.push(async () => {
        await this.host.runsc.run(['delete', '-force', sandboxId]);
        await this.host.removeCgroups(sandboxId);
      });
      await this.host.runscStep(
        sandboxId,
        [
          'restore',
          ...(await restoreReadFlags(plain.dir)),
          `--image-path=${plain.dir}`,
          '--bundle',
          paths.dir,
          '--detach',
          sandboxId,
        ],
        'restore',
        options.signal,
      );
      timer?.mark('runscRestore');
      await plain.remove(); // image encryption hook: the plaintext copy is gone once runsc has read it
      const state = await this.host.runsc.state(sandboxId);
      if (state?.status !== 'running') {
        throw new RuntimeError(`sandbox ${sandboxId} is ${state?.status ?? 'missing'} right after restore`);
      }
      if (alongside === undefined) {
        await this.host.started(sandboxId, state.pid, options.resources.cpuCount);
        timer?.mark('stateAndStarted');
      } else {
        await Promise.all([this.host.started(sandboxId, state.pid, options.resources.cpuCount), alongside()]);
        timer?.mark('stateStartedAndHostname');
        // A stub process the step started meanwhile may have missed the walk: mark again, off the critical path.
        void preferStubsForOomKill(state.pid).catch(() => undefined);
      }
      return state.pid;
    } catch (error) {
      for (const undo of made.reverse()) await undo().catch(() => undefined);
      throw error;
    }
  }

  /**
   * Give a restored child its own hostname (the UTS namespace is part of the image), its /etc/hosts line for
   * 127.0.1.1 (Debian's line for the machine's own name; the disk copy still named the parent) when there is one,
   * and its /etc/hostname when that file named the parent (a sandbox's own different content is kept).
   */
  private async setHostname(sandboxId: string, hostname: string): Promise<void> {
    const script =
      'old=$(hostname); hostname "$1" || exit 1; f=/etc/hosts; ' +
      'if [ -f "$f" ] && [ ! -L "$f" ] && grep -q "^127\\.0\\.1\\.1[[:space:]]" "$f"; then ' +
      'sed -i "s/^127\\.0\\.1\\.1[[:space:]].*/127.0.1.1\t$1/" "$f"; fi; f=/etc/hostname; ' +
      'if [ -f "$f" ] && [ ! -L "$f" ] && [ "$(cat "$f")" = "$old" ]; then printf "%s\\n" "$1" > "$f"; fi';
    // Only names a hosts file and sed's replacement take as they are (ours are `sbx-...`).
    const argv = HOSTNAME_PATTERN.test(hostname) ? ['/bin/sh', '-c', script, 'sh', hostname] : ['hostname', hostname];
    const result = await this.host.runsc.run(['exec', '--cap', 'CAP_SYS_ADMIN', sandboxId, ...argv]);
    if (result.exitCode !== 0) {
      this.host.warn({ sandboxId, stderr: tail(result.stderr, 5) }, 'setting the hostname of a fork failed');
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
   * saves a sandbox that can open no file, whose restore stopped right after it (chaos seed 149856408: a gofer
   * killed ~90 ms into a pause; the pause answered ok and every resume failed "stopped right after restore").
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

/** Layout of a snapshot directory: `manifest.json`, `disk.img`, `image/`. */
export function snapshotLocation(dir: string): StateLocation {
  return { imageDir: join(dir, 'image'), diskPath: join(dir, 'disk.img'), manifestPath: join(dir, 'manifest.json') };
}

/** SIGKILL a host process and wait until it has exited (a zombie counts: its files are closed). */
async function killAndWait(pid: number, timeoutMs = 10_000): Promise<void> {
  if (pid <= 0) return;
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    return;
  }
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!(await processAlive(pid))) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new RuntimeError(`process ${pid} did not exit after SIGKILL`);
}

/** Name prefix of a spent pause image moved aside by {@link dropSpentImage} (removed by `settle` after a crash). */
const SPENT_PREFIX = 'spent-';

/**
 * Move a restored pause image out of the way at once (a rename) and delete it in the background: deleting a
 * 543 MB image took 0.45–0.55 s of the resume here. A crash before the delete ends leaves a `spent-*` directory
 * that `settle` removes.
 */
async function dropSpentImage(paths: { dir: string; checkpointDir: string }): Promise<void> {
  await dropAside(paths.checkpointDir, paths.dir);
}

/**
 * Rename `path` to a `spent-*` name in `sandboxDir` (at once) and delete it in the background (a fork point's
 * removal took 5–280 ms of a loaded fork). A crash before the delete ends leaves it for `settle`; a missing `path`
 * is fine.
 */
async function dropAside(path: string, sandboxDir: string): Promise<void> {
  const spent = join(sandboxDir, `${SPENT_PREFIX}${randomBytes(6).toString('hex')}`);
  try {
    await rename(path, spent);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw error;
  }
  void rm(spent, { recursive: true, force: true }).catch(() => undefined);
}

/**
 * Unmount everything under each of `dirs`, in that order (the overlay before the disk it lives on), retrying while
 * busy; never lazily, so the disk really is released. One `umount` process takes every mount point (since session
 * 7; it was one per point: each start is 5–40 ms here).
 */
async function unmountStrict(...dirs: string[]): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    const points = (await Promise.all(dirs.map((dir) => mountsUnder(dir)))).flat();
    if (points.length === 0) return;
    if (attempt === 50) throw new RuntimeError(`cannot unmount ${points.join(', ')}: busy`);
    if (attempt > 0) await new Promise((resolve) => setTimeout(resolve, 20));
    // A busy point fails alone (umount goes on with the next and exits non-zero): the loop looks again.
    await runCommand('umount', points);
  }
}

/** How often {@link waitForDiskRelease} asks `losetup -d` again while it polls sysfs, ms. */
const DETACH_AGAIN_MS = 250;

/**
 * Wait until the disk's loop device is gone. The gofer and sentry hold the filesystem in their own mount
 * namespaces, so it stays alive (and is written to at its final unmount) after the host unmount until they have
 * exited; only then is the disk image frozen. Its end is seen by polling sysfs every 5 ms. A device not yet marked
 * autoclear is detached with `losetup -d` (at once and every {@link DETACH_AGAIN_MS}); one that is (`mount -o
 * loop` marks it so) needs no `losetup` process (since session 7: it started one per pause, 5–40 ms here). Before
 * session 6 a `losetup -d` process was started every 10 ms of the wait.
 */
async function waitForDiskRelease(sandboxDir: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let detachAt = 0;
  for (;;) {
    const left = await loopDevicesUnder(sandboxDir);
    if (left.length === 0) return;
    if (Date.now() >= detachAt) {
      for (const device of left) {
        if (!(await autoclearSet(device))) await runCommand('losetup', ['-d', device]);
      }
      detachAt = Date.now() + DETACH_AGAIN_MS;
    }
    if (Date.now() > deadline) throw new RuntimeError(`the disk is still in use: ${left.join(', ')}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** Whether the kernel detaches loop device `device` (`/dev/loopN`) at its last close (sysfs `loop/autoclear`). */
async function autoclearSet(device: string): Promise<boolean> {
  const flag = await readFile(`/sys/block/${device.slice('/dev/'.length)}/loop/autoclear`, 'utf8').catch(() => '');
  return flag.trim() === '1';
}

/** Write back everything cached for the overlay and the disk, so a copy of the disk image sees it. */
async function flushDisk(rootfs: string, diskDir: string): Promise<void> {
  await mustRun('sync', ['-f', rootfs, diskDir], 'syncing the disk');
}

/** Rename `from` to `to`, copying (sparse) and removing `from` when they are on different filesystems. */
async function moveFile(from: string, to: string): Promise<void> {
  try {
    await rename(from, to);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EXDEV') throw error;
    await copySparse(from, to);
    await rm(from, { force: true });
  }
}

/** Hard-link every file of `from` into a new `to` (images are immutable), copying across filesystems. */
async function linkOrCopyDir(from: string, to: string): Promise<void> {
  await mkdir(to, { recursive: true });
  for (const name of await readdir(from)) {
    await link(join(from, name), join(to, name)).catch(async (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EXDEV') throw error;
      await copySparse(join(from, name), join(to, name));
    });
  }
}
