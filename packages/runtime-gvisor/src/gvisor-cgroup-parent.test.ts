/**
 * Per-instance cgroup parents `/sys/fs/cgroup/<controller>/burrow/<hash>` (hash: sha256 of the data dir) do not
 * accumulate: a driver removes its own at close() when no sandbox cgroup is left under it, and the reaper removes
 * other instances' empty parents whose data dir is gone (their owner record says which). Real runsc, real cgroupfs.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, rmdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testSandboxId } from '@burrow/runtime/conformance';
import { afterAll, describe, expect, it } from 'vitest';
import { GvisorDriver } from './gvisor-driver.js';
import { cgroupDirs } from './host-plumbing.js';
import { cgroupParentHash } from './sandbox-cgroups.js';
import { buildTemplate } from './template-builder.js';

const TEST_TEMPLATES_DIR = '/var/tmp/burrow-test-templates';
const CGROUP_ROOT = '/sys/fs/cgroup';
const CONTROLLERS = ['pids', 'memory'];

const parentDirs = (hash: string) => cgroupDirs(CGROUP_ROOT, '', join('burrow', hash));

/** Directories this file made, removed at the end whatever happened (children first). */
const made: string[] = [];
const base = await mkdtemp(join(tmpdir(), 'burrow-cgparent-'));
const ownersDir = join(base, 'owners');

afterAll(async () => {
  for (const dir of made.reverse()) await rmdir(dir).catch(() => undefined);
  await rm(base, { recursive: true, force: true });
});

describe('cgroup parents of instances', () => {
  it('close() removes the driver’s own parent (and its owner record) once its sandboxes are gone', async () => {
    const dataDir = join(base, 'data');
    const hash = cgroupParentHash(dataDir);
    const template = await buildTemplate({ templatesDir: TEST_TEMPLATES_DIR, apt: [], run: [] });
    const driver = new GvisorDriver({ dataDir, maxProcesses: 256, cgroupOwnersDir: ownersDir, execAgent: false });
    const sandboxId = testSandboxId();
    try {
      await driver.create({
        sandboxId,
        template,
        resources: { cpuCount: 1, memoryMiB: 256, diskMiB: 256 },
        hostname: 'cgparent',
      });
      expect((await parentDirs(hash)).length).toBeGreaterThan(0);
      expect(existsSync(join(ownersDir, hash))).toBe(true);
      // A running sandbox keeps the parent: close() leaves it (the server may stop while sandboxes run on).
      await driver.close();
      expect((await parentDirs(hash)).length).toBeGreaterThan(0);
    } finally {
      await driver.delete(sandboxId);
    }
    await driver.close();
    expect(await parentDirs(hash)).toEqual([]);
    expect(existsSync(join(ownersDir, hash))).toBe(false);
  }, 180_000);

  it('the reaper removes empty parents whose data dir is gone; never a busy one or one whose data dir exists', async () => {
    const hashOf = () => randomBytes(6).toString('hex');
    const [gone, alive, busy, unrecorded] = [hashOf(), hashOf(), hashOf(), hashOf()];
    await mkdir(ownersDir, { recursive: true });
    for (const hash of [gone, alive, busy, unrecorded]) {
      for (const controller of CONTROLLERS) {
        const dir = join(CGROUP_ROOT, controller, 'burrow', hash);
        await mkdir(dir);
        made.push(dir);
      }
    }
    const busyChild = join(CGROUP_ROOT, 'pids', 'burrow', busy, testSandboxId());
    await mkdir(busyChild);
    made.push(busyChild);
    await writeFile(join(ownersDir, gone), join(base, 'no-such-data-dir'));
    await writeFile(join(ownersDir, busy), join(base, 'no-such-data-dir'));
    await writeFile(join(ownersDir, alive), base);

    const driver = new GvisorDriver({ dataDir: join(base, 'reaper-data'), cgroupOwnersDir: ownersDir });
    const removed = await driver.reapStaleCgroupParents();
    expect(removed).toContain(gone);
    expect(removed).not.toContain(alive);
    expect(removed).not.toContain(busy);
    // Without an owner record only a parent untouched for an hour is removed; this one was just made.
    expect(removed).not.toContain(unrecorded);
    expect(await parentDirs(gone)).toEqual([]);
    expect(existsSync(join(ownersDir, gone))).toBe(false);
    expect((await parentDirs(alive)).length).toBe(CONTROLLERS.length);
    expect(await parentDirs(busy)).toContain(join(CGROUP_ROOT, 'pids', 'burrow', busy));
    expect(existsSync(join(ownersDir, busy))).toBe(true);
    await driver.close();
  });
});
