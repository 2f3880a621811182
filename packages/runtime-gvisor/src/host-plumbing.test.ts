/**
 * `goferGone` on a stand-in pids cgroup (a temp dir with a `cgroup.procs` file) listing real host processes: this
 * test process as the "sentry" and a `sh … gofer` child as the "gofer". Fast; no runsc.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { goferGone } from './host-plumbing.js';

describe('goferGone', () => {
  let dir = '';
  let gofer: ChildProcess;
  const procs = (pids: number[]) => writeFile(join(dir, 'cgroup.procs'), pids.map((p) => `${p}\n`).join(''));

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'burrow-gofer-'));
    gofer = spawn('sh', ['-c', 'sleep 30', 'gofer'], { stdio: 'ignore' });
  });
  afterAll(async () => {
    gofer.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
  });

  test('the sentry with a gofer beside it: not gone', async () => {
    await procs([process.pid, gofer.pid ?? 0]);
    expect(await goferGone(dir, process.pid)).toBe(false);
  });

  test('the sentry alone: gone', async () => {
    await procs([process.pid]);
    expect(await goferGone(dir, process.pid)).toBe(true);
  });

  test('cannot tell (no cgroup, or a cgroup without the sentry): not gone', async () => {
    expect(await goferGone(join(dir, 'missing'), process.pid)).toBe(false);
    await procs([gofer.pid ?? 0]);
    expect(await goferGone(dir, process.pid)).toBe(false);
  });
});
