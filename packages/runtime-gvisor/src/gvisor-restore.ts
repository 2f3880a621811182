import { mkdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { type CreateFromSnapshotOptions, type CreateOptions, RuntimeError } from '@burrow/runtime';
import { copySparse, type StateLocation } from './checkpoint-files.js';
import type { CheckpointHost, StepTimer, UndoList } from './checkpoint-host.js';
import { moveFile } from './checkpoint-host-steps.js';
import { HOSTNAME_PATTERN } from './guest-identity-files.js';
import { preferStubsForOomKill } from './host-plumbing.js';
import { openImage } from './image-encryption.js';
import { tail } from './run-command.js';

/**
 * Largest `pages.img` restored without `--direct`, bytes. Measured by a driver probe (idle sandbox of 1 GiB,
 * restores alternating with and without the flag, load ~8): its 1.3 MB pages file (tini, two shells, the
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

/**
 * Restores of a checkpoint image into a fresh container: a resume's, a memory snapshot's and each fork child's
 * (a snapshot without memory gets a fresh container on its disk copy instead).
 */
export class GvisorRestorer {
  constructor(private readonly host: CheckpointHost) {}

  /**
   * `GvisorCheckpointer.createFromSnapshot` from a state `source` the caller verified (or made itself, just now).
   * @param fork.takeDisk move `source`'s disk image instead of copying it: only for a fork point of this call with
   *   a single child (nothing else reads that disk, and the point is removed after)
   * @param fork.diskCopied the child's disk copy made ahead by the fork (see `GvisorForker.copyDisksAhead`): awaited
   *   instead of copying here
   * @param fork.identities a fork's list of pending identity steps: the child's hostname `runsc exec` is pushed
   *   there (it never rejects) instead of being awaited, so the fork's next restore starts meanwhile; the fork
   *   awaits them
   */
  async createFrom(
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
   * Restore an image into a fresh container of `options.sandboxId` on its mounted disk; undoes itself on failure.
   * @param alongside run once the container runs, concurrently with the host's `started` step (a fork child's
   *   hostname); the stubs it may add are marked for the OOM killer again afterwards, in the background
   * @returns the host pid of the restored sandbox's sentry
   */
  async restoreInto(
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
}
