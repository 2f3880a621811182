import type { ProcessExit, SandboxProcess } from '@burrow/runtime';

/**
 * Why an exec ended, where the exit status the sandbox reports does not say it: gVisor reports a process whose
 * host stub the OOM killer ended as an exit with code 1 (no signal), and a `runsc exec` that a checkpoint cuts off
 * ends with whatever its client saw (128 after "WaitPID failed: EOF", or the command's own code when it read its
 * input's end first). The exec agent reports a checkpoint itself (agent-hub.ts).
 */
export class ExecExitReasons {
  /** `runsc exec` processes still running, per sandbox: set to true when a checkpoint step begins. */
  private readonly runscExecs = new Map<string, Set<{ checkpointed: boolean }>>();

  /** @param oomKillCount the memory cgroup's `oom_kill` counter of a sandbox, null when it cannot be read */
  constructor(private readonly oomKillCount: (sandboxId: string) => Promise<number | null>) {}

  /** The counter before an exec starts; call it before starting the process, await it in {@link track}. */
  oomKillsBefore(sandboxId: string): Promise<number | null> {
    return this.oomKillCount(sandboxId).catch(() => null);
  }

  /**
   * The process with its exit labelled: `oom_killed` (SIGKILL) when it ended with a failure while the sandbox's
   * memory cgroup counted an OOM kill; for a `runsc exec` (`via: 'runsc'`), `sandbox_checkpoint` (SIGKILL) when a
   * checkpoint step began while it ran. Nothing else changes.
   */
  track(
    sandboxId: string,
    process: SandboxProcess,
    oomKillsBefore: Promise<number | null>,
    via: 'agent' | 'runsc',
  ): SandboxProcess {
    const entry = { checkpointed: false };
    if (via === 'runsc') {
      let set = this.runscExecs.get(sandboxId);
      if (set === undefined) {
        set = new Set();
        this.runscExecs.set(sandboxId, set);
      }
      set.add(entry);
    }
    const ended = process.exited.finally(() => this.forget(sandboxId, entry));
    const exited = ended.then(async (exit): Promise<ProcessExit> => {
      if (exit.reason !== undefined || exit.detached !== undefined) return exit;
      if (entry.checkpointed) return { exitCode: null, signal: 'SIGKILL', reason: 'sandbox_checkpoint' };
      if (exit.exitCode === 0) return exit;
      const [before, after] = await Promise.all([oomKillsBefore, this.oomKillsBefore(sandboxId)]);
      if (before !== null && after !== null && after > before) {
        return { exitCode: null, signal: 'SIGKILL', reason: 'oom_killed' };
      }
      return exit;
    });
    return {
      stdin: process.stdin,
      stdout: process.stdout,
      stderr: process.stderr,
      kill: (signal) => process.kill(signal),
      exited,
    };
  }

  /** A checkpoint step (pause, fork, memory snapshot) begins: every `runsc exec` of the sandbox running now ends by it. */
  checkpointStarting(sandboxId: string): void {
    for (const entry of this.runscExecs.get(sandboxId) ?? []) entry.checkpointed = true;
  }

  private forget(sandboxId: string, entry: { checkpointed: boolean }): void {
    const set = this.runscExecs.get(sandboxId);
    set?.delete(entry);
    if (set?.size === 0) this.runscExecs.delete(sandboxId);
  }
}
