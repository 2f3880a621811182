import type { CreateOptions } from '@burrow/runtime';
import type { ImageEncryption } from './image-encryption.js';
import type { RunscCli } from './runsc-cli.js';

/** Undo steps of a half-done operation, run in reverse. */
export type UndoList = Array<() => Promise<void>>;

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
export class StepTimer {
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
