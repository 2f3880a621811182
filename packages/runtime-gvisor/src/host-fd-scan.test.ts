import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Resources } from '@burrow/contract';
import { CheckpointBlockedError, type TemplateRef } from '@burrow/runtime';
import { runInSandbox, testSandboxId } from '@burrow/runtime/conformance';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { GvisorDriver } from './gvisor-driver.js';
import { parseHostFdReport } from './host-fd-scan.js';
import { buildTemplate } from './template-builder.js';

const TEST_TEMPLATES_DIR = '/var/tmp/burrow-test-templates';
const RESOURCES: Resources = { cpuCount: 1, memoryMiB: 256, diskMiB: 512 };
/** Rounds of create → background command at once → pause → resume → fork → snapshot (50 in a long run). */
const ROUNDS = Number(process.env.BURROW_TEST_PAUSE_ROUNDS ?? 4);

describe('parseHostFdReport', () => {
  const report = [
    '/proc/1/fd/:',
    'lrwx------ 1 root root 64 Dec  2 01:41 0 -> host:[1]',
    'l-wx------ 1 root root 64 Dec  2 01:41 1 -> host:[2]',
    '',
    '/proc/2/fd/:',
    'l-wx------ 1 root root 64 Dec  2 01:41 1 -> host:[2]',
    'lr-x------ 1 root root 64 Dec  2 01:41 3 -> /dev/.burrow-spawn',
    '',
    '/proc/7/fd/:',
    'lr-x------ 1 root root 64 Dec  2 01:41 0 -> /dev/null',
    'l-wx------ 1 root root 64 Dec  2 01:41 1 -> host:[5]',
    'l-wx------ 1 root root 64 Dec  2 01:41 2 -> host:[6]',
    '',
    '/proc/9/fd/:',
    'l-wx------ 1 root root 64 Dec  2 01:41 3 -> host:[8]',
    '/proc/10/fd/:',
    'l-wx------ 1 root root 64 Dec  2 01:41 1 -> host:[8]',
    'self 9 10',
    'end-of-fds',
    'comm 1 tini',
    'comm 2 sh',
    'comm 7 sleep',
    'comm 9 sh',
    'comm 10 ls',
  ].join('\n');

  it("names the processes holding host descriptors other than the init's and the scan's own", () => {
    expect(parseHostFdReport(report)).toEqual([{ pid: 7, command: 'sleep', fds: ['1 -> host:[5]', '2 -> host:[6]'] }]);
  });

  it('finds nothing when only the init and the scan hold host descriptors', () => {
    const clean = report.replace(/host:\[5\]|host:\[6\]/g, '/dev/null');
    expect(parseHostFdReport(clean)).toEqual([]);
  });
});

describe('checkpoints never save a host descriptor (real runsc)', { timeout: 600_000 }, () => {
  let dataDir: string;
  let template: TemplateRef;
  const drivers: GvisorDriver[] = [];
  const created: Array<[GvisorDriver, string]> = [];

  const options = (sandboxId: string) => ({ sandboxId, template, resources: RESOURCES, hostname: 'h' });
  const create = async (driver: GvisorDriver) => {
    const id = testSandboxId();
    created.push([driver, id]);
    await driver.create(options(id));
    return id;
  };
  const sh = async (driver: GvisorDriver, id: string, script: string) => {
    const run = await runInSandbox(driver, id, ['sh', '-c', script]);
    expect(run.exitCode, run.stderr.toString()).toBe(0);
    return run.stdout.toString().trim();
  };
  const pauseError = (driver: GvisorDriver, id: string) =>
    driver.pause(id).then(
      () => null,
      (error: unknown) => error,
    );

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'burrow-hostfd-test-'));
    template = await buildTemplate({ templatesDir: TEST_TEMPLATES_DIR, apt: [], run: [] });
  });

  afterEach(async () => {
    for (const [driver, id] of created) await driver.delete(id);
    created.length = 0;
  });

  afterAll(async () => {
    for (const driver of drivers) await driver.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  it(`a background command started at once after create survives pause, resume, fork and snapshot (${ROUNDS} rounds)`, {
    timeout: 120_000 * ROUNDS,
  }, async () => {
    const driver = new GvisorDriver({ dataDir: join(dataDir, 'agent'), maxProcesses: 256 });
    drivers.push(driver);
    const alive = (id: string, names: string[]) =>
      sh(driver, id, names.map((n) => `kill -0 "$(cat /root/${n}.pid)" && echo alive`).join(' && '));
    const background = (id: string, name: string) => sh(driver, id, `sleep 3600 & echo $! > /root/${name}.pid`);
    for (let round = 0; round < ROUNDS; round++) {
      const id = await create(driver);
      // Each command starts the moment the sandbox (re)started or was checkpointed, before its exec agent is back:
      // none may take the `runsc exec` path, whose host descriptors would make the next image unrestorable.
      await background(id, 'a');
      await driver.pause(id);
      await driver.resume(options(id));
      await background(id, 'b');
      const snapshotDir = join(dataDir, `snap-${round}`);
      await driver.snapshot(id, { targetDir: snapshotDir, memory: true });
      await background(id, 'c');
      const child = testSandboxId();
      created.push([driver, child]);
      await driver.fork(id, { template, resources: RESOURCES, children: [{ sandboxId: child, hostname: 'c' }] });
      await background(id, 'd');
      await driver.pause(id);
      await driver.resume(options(id));
      expect(await alive(id, ['a', 'b', 'c', 'd'])).toBe('alive\nalive\nalive\nalive');
      expect(await alive(child, ['a', 'b', 'c'])).toBe('alive\nalive\nalive');
      const fromSnapshot = testSandboxId();
      created.push([driver, fromSnapshot]);
      await driver.createFromSnapshot({ ...options(fromSnapshot), sourceDir: snapshotDir, memory: true });
      expect(await alive(fromSnapshot, ['a', 'b'])).toBe('alive\nalive');
      for (const [d, sandboxId] of created.splice(0)) await d.delete(sandboxId);
      await rm(snapshotDir, { recursive: true, force: true });
    }
  });

  it('refuses to checkpoint while a process holds a runsc exec host descriptor, and keeps the sandbox running', async () => {
    // Without the exec agent every exec is a `runsc exec`: the path that hands host descriptors to the command.
    const driver = new GvisorDriver({ dataDir: join(dataDir, 'no-agent'), maxProcesses: 256, execAgent: false });
    drivers.push(driver);
    const id = await create(driver);
    await sh(driver, id, 'sleep 3600 & echo $! > /root/held.pid');
    await sh(driver, id, 'sleep 3600 >/dev/null 2>&1 & echo $! > /root/quiet.pid');

    const error = await pauseError(driver, id);
    expect(error).toBeInstanceOf(CheckpointBlockedError);
    const blocked = error as CheckpointBlockedError;
    expect(blocked.reason).toBe('host_socket_open');
    const heldPid = Number(await sh(driver, id, 'cat /root/held.pid'));
    expect(blocked.message).toContain(`pid ${heldPid} (sleep`);
    expect(new Set(blocked.blockers.map((b) => b.pid))).toEqual(new Set([heldPid]));
    expect(blocked.blockers.map((b) => b.command)).toContain('sleep');
    expect((await driver.observe(id)).status).toBe('running');
    expect(await sh(driver, id, 'echo still-here')).toBe('still-here');
    const child = testSandboxId();
    const forkError = await driver
      .fork(id, { template, resources: RESOURCES, children: [{ sandboxId: child, hostname: 'c' }] })
      .then(
        () => null,
        (e: unknown) => e,
      );
    expect((forkError as CheckpointBlockedError | null)?.reason).toBe('host_socket_open');
    created.push([driver, child]);

    await sh(driver, id, 'kill "$(cat /root/held.pid)"');
    await driver.pause(id);
    await driver.resume(options(id));
    expect(await sh(driver, id, 'cat /root/quiet.pid')).toMatch(/^\d+$/);
  });
});
