import { PassThrough } from 'node:stream';
import type { ProcessExit, SandboxProcess } from '@burrow/runtime';
import { describe, expect, it } from 'vitest';
import { ExecExitReasons } from './exec-exit-reason.js';

/** A FAKE process (no sandbox): its exit is whatever the test settles it with. */
function fakeProcess(): { process: SandboxProcess; exit: (exit: ProcessExit) => void } {
  let exit!: (value: ProcessExit) => void;
  const exited = new Promise<ProcessExit>((resolve) => {
    exit = resolve;
  });
  const process: SandboxProcess = {
    stdin: new PassThrough(),
    stdout: new PassThrough(),
    stderr: new PassThrough(),
    kill: async () => undefined,
    exited,
  };
  return { process, exit };
}

describe('ExecExitReasons', () => {
  it('labels a failure during which the memory cgroup counted an OOM kill, and nothing else', async () => {
    let count = 3;
    const reasons = new ExecExitReasons(async () => count);
    const killed = fakeProcess();
    const tracked = reasons.track('s1', killed.process, reasons.oomKillsBefore('s1'), 'agent');
    await Promise.resolve();
    count = 4;
    killed.exit({ exitCode: 1, signal: null });
    expect(await tracked.exited).toEqual({ exitCode: null, signal: 'SIGKILL', reason: 'oom_killed' });

    // Exit 0 with a kill counted meanwhile (another process of the sandbox) stays exit 0.
    const clean = fakeProcess();
    const cleanTracked = reasons.track('s1', clean.process, reasons.oomKillsBefore('s1'), 'agent');
    await Promise.resolve();
    count = 5;
    clean.exit({ exitCode: 0, signal: null });
    expect(await cleanTracked.exited).toEqual({ exitCode: 0, signal: null });

    // A failure with no kill counted stays what it was.
    const failed = fakeProcess();
    const failedTracked = reasons.track('s1', failed.process, reasons.oomKillsBefore('s1'), 'agent');
    failed.exit({ exitCode: 1, signal: null });
    expect(await failedTracked.exited).toEqual({ exitCode: 1, signal: null });
  });

  it('a runsc exec running when a checkpoint step begins ends by it, even when it reports exit 0', async () => {
    const reasons = new ExecExitReasons(async () => null);
    const cut = fakeProcess();
    const cutTracked = reasons.track('s1', cut.process, reasons.oomKillsBefore('s1'), 'runsc');
    const other = fakeProcess();
    const otherTracked = reasons.track('s2', other.process, reasons.oomKillsBefore('s2'), 'runsc');
    reasons.checkpointStarting('s1');
    cut.exit({ exitCode: 0, signal: null });
    other.exit({ exitCode: 0, signal: null });
    expect(await cutTracked.exited).toEqual({ exitCode: null, signal: 'SIGKILL', reason: 'sandbox_checkpoint' });
    expect(await otherTracked.exited).toEqual({ exitCode: 0, signal: null });
    // One started after that checkpoint and ending normally is not labelled.
    const later = fakeProcess();
    const laterTracked = reasons.track('s1', later.process, reasons.oomKillsBefore('s1'), 'runsc');
    later.exit({ exitCode: 0, signal: null });
    expect(await laterTracked.exited).toEqual({ exitCode: 0, signal: null });
  });
});
