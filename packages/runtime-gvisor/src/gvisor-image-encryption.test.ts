import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Resources } from '@burrow/contract';
import { CheckpointRejectedError, type TemplateRef } from '@burrow/runtime';
import { runInSandbox, testSandboxId } from '@burrow/runtime/conformance';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GvisorDriver } from './gvisor-driver.js';
import { imageKey } from './image-encryption.js';
import { buildTemplate } from './template-builder.js';

const TEST_TEMPLATES_DIR = '/var/tmp/burrow-test-templates';
const RESOURCES: Resources = { cpuCount: 1, memoryMiB: 256, diskMiB: 512 };

/**
 * A process holding a marker only in its memory: built reversed from its argument (so the argument is not the
 * marker), repeated over 64 KiB, never written to the disk. Asked through /tmp/ask, it writes its marker and pid to
 * /dev/holder-answer (gVisor's own /dev tmpfs: sandbox memory, part of the image and not of the disk).
 */
const HOLDER = `
import os, sys, time
m = sys.argv[1][::-1]
keep = (m + "\\n") * (65536 // (len(m) + 1))
open("/tmp/ready", "w").close()
while True:
    if os.path.exists("/tmp/ask"):
        os.remove("/tmp/ask")
        open("/dev/holder-answer.tmp", "w").write(keep.split()[0] + " " + str(os.getpid()))
        os.rename("/dev/holder-answer.tmp", "/dev/holder-answer")
    time.sleep(0.05)
`;

describe('GvisorDriver with image encryption (real runsc)', { timeout: 300_000 }, () => {
  let dataDir: string;
  let plainRoot: string;
  let driver: GvisorDriver;
  let template: TemplateRef;
  const key = imageKey(randomBytes(32));
  const drivers: GvisorDriver[] = [];
  const created: Array<{ driver: GvisorDriver; id: string }> = [];

  const options = (sandboxId: string) => ({
    sandboxId,
    template,
    resources: RESOURCES,
    hostname: `h-${sandboxId.slice(4, 10)}`,
  });
  const newDriver = (extra: Partial<ConstructorParameters<typeof GvisorDriver>[0]> = {}) => {
    const made = new GvisorDriver({ dataDir, maxProcesses: 256, ...extra });
    drivers.push(made);
    return made;
  };
  const sh = async (on: GvisorDriver, id: string, script: string) => {
    const run = await runInSandbox(on, id, ['sh', '-c', script]);
    if (run.exitCode !== 0) throw new Error(`${script} failed: ${run.stderr.toString()}`);
    return run.stdout.toString().trim();
  };
  /** A sandbox running {@link HOLDER} with a fresh marker, ready. */
  const holding = async (on: GvisorDriver) => {
    const id = testSandboxId();
    created.push({ driver: on, id });
    await on.create(options(id));
    const marker = `BURROW-MEMORY-MARKER-${randomBytes(8).toString('hex')}`;
    await writeFile(join(on.rootDir(id), 'root/holder.py'), HOLDER);
    const argv = ['python3', '/root/holder.py', [...marker].reverse().join('')];
    await on.spawn(id, { argv, env: { PATH: '/usr/bin:/bin' }, cwd: '/' });
    await sh(on, id, 'i=0; while [ ! -e /tmp/ready ]; do i=$((i+1)); [ $i -gt 600 ] && exit 1; sleep 0.05; done');
    const [, pid] = (await ask(on, id)).split(' ');
    return { id, marker, pid: Number(pid) };
  };
  const ask = (on: GvisorDriver, id: string) =>
    sh(
      on,
      id,
      'rm -f /dev/holder-answer; touch /tmp/ask; i=0; while [ ! -e /dev/holder-answer ]; do i=$((i+1)); [ $i -gt 600 ] && exit 1; ' +
        'sleep 0.05; done; cat /dev/holder-answer',
    );
  /** Whether any file under `dir` holds `marker`. */
  const holds = async (dir: string, marker: string): Promise<boolean> => {
    for (const name of await readdir(dir, { recursive: true })) {
      const path = join(dir, name);
      if ((await stat(path)).isFile() && (await readFile(path)).includes(marker)) return true;
    }
    return false;
  };
  const imageDir = (id: string) => join(dataDir, 'sandboxes', id, 'checkpoint', 'image');
  const plainLeft = async () => readdir(plainRoot).catch(() => [] as string[]);

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'burrow-image-encryption-test-'));
    plainRoot = join('/dev/shm', `burrow-image-encryption-test-${randomBytes(4).toString('hex')}`);
    template = await buildTemplate({ templatesDir: TEST_TEMPLATES_DIR, apt: [], run: [] });
    driver = newDriver({ imageEncryption: { key, plainRoot } });
  });

  afterAll(async () => {
    for (const { driver: on, id } of created) await on.delete(id).catch(() => undefined);
    for (const on of drivers) await on.close();
    await rm(dataDir, { recursive: true, force: true });
    await rm(plainRoot, { recursive: true, force: true });
  });

  it('without encryption a pause image holds the marker in plaintext (the check below can fail)', async () => {
    const plain = newDriver();
    const { id, marker, pid } = await holding(plain);
    await plain.pause(id);
    expect(await holds(imageDir(id), marker)).toBe(true);
    const manifest = JSON.parse(await readFile(join(imageDir(id), '..', 'manifest.json'), 'utf8'));
    expect(manifest.encryption).toBeUndefined();
    await plain.resume(options(id));
    expect(await ask(plain, id)).toBe(`${marker} ${pid}`);
  });

  it('an encrypted pause image does not hold the marker; resume brings the process back intact', async () => {
    const { id, marker, pid } = await holding(driver);
    for (let cycle = 0; cycle < 2; cycle++) {
      const info = await driver.pause(id);
      expect(info.imageSizeBytes).toBeGreaterThan(0);
      expect(await holds(imageDir(id), marker)).toBe(false);
      const manifest = JSON.parse(await readFile(join(imageDir(id), '..', 'manifest.json'), 'utf8'));
      expect(manifest.encryption).toEqual({ format: 'burrow-image-aes-256-gcm/1', keyId: key.keyId });
      expect(await plainLeft()).toEqual([]);
      await driver.resume(options(id));
      expect(await plainLeft()).toEqual([]);
      expect(await ask(driver, id)).toBe(`${marker} ${pid}`);
    }
  });

  it('a wrong or missing key fails resume with a clear error; the sandbox stays paused and resumes with its key', async () => {
    const { id, marker, pid } = await holding(driver);
    await driver.pause(id);
    const before = await readdir(imageDir(id));
    const otherKey = imageKey(randomBytes(32));
    const wrong = newDriver({ imageEncryption: { key: otherKey, plainRoot } });
    await expect(wrong.resume(options(id))).rejects.toThrow(
      new RegExp(`encrypted with key id ${key.keyId}; this server's image key has id ${otherKey.keyId}`),
    );
    await expect(wrong.resume(options(id))).rejects.toBeInstanceOf(CheckpointRejectedError);
    await expect(newDriver().resume(options(id))).rejects.toThrow(/image encryption is off on this server/);
    expect((await driver.observe(id)).status).toBe('paused');
    expect(await readdir(imageDir(id))).toEqual(before);
    expect(await plainLeft()).toEqual([]);
    await driver.resume(options(id));
    expect(await ask(driver, id)).toBe(`${marker} ${pid}`);
  });

  it('a memory snapshot (running and paused source) does not hold the marker and seeds a sandbox with it', async () => {
    const { id, marker } = await holding(driver);
    const snapshots = await mkdtemp(join(dataDir, 'snapshots-'));
    const running = join(snapshots, 'running');
    await driver.snapshot(id, { targetDir: running, memory: true });
    expect(await holds(running, marker)).toBe(false);
    await driver.pause(id);
    const paused = join(snapshots, 'paused');
    await driver.snapshot(id, { targetDir: paused, memory: true });
    expect(await holds(paused, marker)).toBe(false);
    for (const dir of [running, paused]) {
      const manifest = JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8'));
      expect(manifest.encryption?.keyId).toBe(key.keyId);
      const child = testSandboxId();
      created.push({ driver, id: child });
      await driver.createFromSnapshot({ ...options(child), sourceDir: dir, memory: true });
      expect((await ask(driver, child)).split(' ')[0]).toBe(marker);
    }
    expect(await plainLeft()).toEqual([]);
  });

  it('forks a running and a paused parent; no plaintext is left on the tmpfs', async () => {
    const { id, marker } = await holding(driver);
    for (const state of ['running', 'paused']) {
      if (state === 'paused') await driver.pause(id);
      const children = [testSandboxId(), testSandboxId()];
      for (const child of children) created.push({ driver, id: child });
      await driver.fork(id, {
        children: children.map((sandboxId) => ({ sandboxId, hostname: `h-${sandboxId.slice(4, 10)}` })),
        template,
        resources: RESOURCES,
      });
      for (const child of children) expect((await ask(driver, child)).split(' ')[0]).toBe(marker);
      expect(await plainLeft()).toEqual([]);
    }
  });

  it('pauses and resumes a sandbox using most of its memory limit (the plaintext on the tmpfs is charged to it)', async () => {
    const id = testSandboxId();
    created.push({ driver, id });
    await driver.create(options(id));
    // 180 MiB of random bytes in a 256 MiB sandbox: the checkpoint's tmpfs copy alone would pass the limit.
    const ballast =
      'import os,time\nb=bytearray()\nfor _ in range(180): b.extend(os.urandom(1<<20))\n' +
      'open("/tmp/ready","w").close()\ntime.sleep(3600)\n';
    await writeFile(join(driver.rootDir(id), 'root/ballast.py'), ballast);
    await driver.spawn(id, { argv: ['python3', '/root/ballast.py'], env: { PATH: '/usr/bin:/bin' }, cwd: '/' });
    await sh(driver, id, 'i=0; while [ ! -e /tmp/ready ]; do i=$((i+1)); [ $i -gt 1200 ] && exit 1; sleep 0.1; done');
    const info = await driver.pause(id);
    expect(info.imageSizeBytes).toBeGreaterThan(180 * 1024 * 1024);
    await driver.resume(options(id));
    expect(await sh(driver, id, 'pgrep -f ballast.py >/dev/null && echo alive')).toBe('alive');
    expect(await plainLeft()).toEqual([]);
  });
});
