/**
 * `goferGone` on a stand-in pids cgroup (a temp dir with a `cgroup.procs` file) listing real host processes: this
 * test process as the "sentry" and a `sh … gofer` child as the "gofer". Fast; no runsc.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { goferGone, mountOverlay } from './host-plumbing.js';

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

describe('mountOverlay', () => {
  test('mounts nosuid,nodev: a setuid file a sandbox made means nothing to the host kernel', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'burrow-overlay-'));
    const [lowerDir, upperDir, workDir, mergedDir] = ['lower', 'upper', 'work', 'merged'].map((d) => join(dir, d)) as [
      string,
      string,
      string,
      string,
    ];
    try {
      for (const d of [lowerDir, upperDir, workDir, mergedDir]) await mkdir(d);
      await mountOverlay({ lowerDir, upperDir, workDir, mergedDir });
      try {
        const line = (await readFile('/proc/self/mountinfo', 'utf8'))
          .split('\n')
          .find((l) => l.split(' ')[4] === mergedDir);
        const options = (line?.split(' ')[5] ?? '').split(',');
        expect(options).toEqual(expect.arrayContaining(['nosuid', 'nodev']));
      } finally {
        execFileSync('umount', [mergedDir]);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
