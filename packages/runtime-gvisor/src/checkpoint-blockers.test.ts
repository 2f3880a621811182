import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Resources } from '@burrow/contract';
import { CheckpointBlockedError, type TemplateRef } from '@burrow/runtime';
import { runInSandbox, testSandboxId } from '@burrow/runtime/conformance';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { DeletedFileOpenError } from './checkpoint-blockers.js';
import { GvisorDriver } from './gvisor-driver.js';
import { buildTemplate } from './template-builder.js';

const TEST_TEMPLATES_DIR = '/var/tmp/burrow-test-templates';
const RESOURCES: Resources = { cpuCount: 1, memoryMiB: 256, diskMiB: 512 };

/**
 * What pytest does to a sandbox (base templates have no pytest): its fd capture dup2s unlinked TemporaryFiles onto
 * fds 1 and 2, a test's tmp_path is a directory under /tmp it works in, and that directory is removed while the
 * process is still in it. The process counts on, and writes what its unlinked files hold next to the count.
 */
const PYTEST_LIKE = `
import os, sys, tempfile, time
held = tempfile.TemporaryFile(); held.write(b"state-x"); held.flush()
for fd in (1, 2):
    cap = tempfile.TemporaryFile(buffering=0); os.dup2(cap.fileno(), fd)
print("captured"); sys.stdout.flush()
named = tempfile.NamedTemporaryFile(delete=False); named.write(b"named"); named.flush(); os.unlink(named.name)
work = tempfile.mkdtemp(prefix="pytest-of-root-"); os.chdir(work); os.rmdir(work)
n = 0
while True:
    n += 1
    held.seek(0); named.seek(0)
    with open("/root/count.tmp", "w") as out: out.write(f"{n} {held.read().decode()} {named.read().decode()}")
    os.replace("/root/count.tmp", "/root/count")
    time.sleep(0.05)
`;

/** Holds a deleted file on the disk (/root) open and works in a deleted disk directory, counting. */
const DISK_HOLDER = `
import os, time
f = open("/root/gone.txt", "w+"); f.write("x"); f.flush(); os.unlink("/root/gone.txt")
os.mkdir("/root/gone-dir"); os.chdir("/root/gone-dir"); os.rmdir("/root/gone-dir")
n = 0
while True:
    n += 1
    with open("/root/count", "w") as out: out.write(str(n))
    time.sleep(0.05)
`;

describe('checkpoints of sandboxes holding deleted files (real runsc)', { timeout: 300_000 }, () => {
  let dataDir: string;
  let driver: GvisorDriver;
  let template: TemplateRef;
  const created = new Set<string>();
  const options = (sandboxId: string) => ({ sandboxId, template, resources: RESOURCES, hostname: 'h-blockers' });

  const sh = async (id: string, script: string) => {
    const run = await runInSandbox(driver, id, ['sh', '-c', script]);
    return { exitCode: run.exitCode, stdout: run.stdout.toString().trim(), stderr: run.stderr.toString() };
  };
  /** A sandbox running `script` (Python) from its init's tree, once it has counted at least once. */
  const running = async (script: string) => {
    const id = testSandboxId();
    created.add(id);
    await driver.create(options(id));
    await writeFile(join(driver.rootDir(id), 'root/script.py'), script);
    await driver.spawn(id, { argv: ['python3', '/root/script.py'], env: { PATH: '/usr/bin:/bin' }, cwd: '/root' });
    await countAbove(id, 0);
    return id;
  };
  /** The script's count once it exceeds `floor` (fails after 20 s). */
  const countAbove = async (id: string, floor: number): Promise<string> => {
    for (let i = 0; i < 200; i++) {
      const read = await sh(id, 'cat /root/count 2>/dev/null');
      if (Number(read.stdout.split(' ')[0]) > floor) return read.stdout;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`the count of ${id} did not pass ${floor}`);
  };

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'burrow-blockers-test-'));
    template = await buildTemplate({ templatesDir: TEST_TEMPLATES_DIR, apt: [], run: [] });
    driver = new GvisorDriver({ dataDir, maxProcesses: 256 });
  });

  afterEach(async () => {
    for (const id of created) await driver.delete(id);
    created.clear();
  });

  afterAll(async () => {
    await driver?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it('pauses and resumes a pytest-like process holding unlinked temporary files in /tmp; it counts on', async () => {
    const id = await running(PYTEST_LIKE);
    const before = Number((await countAbove(id, 0)).split(' ')[0]);
    await driver.pause(id);
    await driver.resume(options(id));
    const after = await countAbove(id, before + 5);
    // Same process, same unlinked files with their contents.
    expect(after).toMatch(/^\d+ state-x named$/);
    expect(Number(after.split(' ')[0])).toBeGreaterThan(before);
    expect((await sh(id, 'pgrep -fc "[s]cript.py"')).stdout).toBe('1');
  });

  it('refuses to pause over a deleted disk file or directory, naming process and path; the sandbox runs on', async () => {
    const id = await running(DISK_HOLDER);
    const pid = Number((await sh(id, 'pgrep -f "[s]cript.py"')).stdout);
    const error = await driver.pause(id).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeletedFileOpenError);
    const blocked = error as CheckpointBlockedError;
    expect(blocked).toBeInstanceOf(CheckpointBlockedError);
    expect(blocked.reason).toBe('deleted_file_open');
    expect([...blocked.blockers].sort((a, b) => a.path.localeCompare(b.path))).toEqual([
      { pid, command: 'python3 /root/script.py', path: '/root/gone-dir' },
      { pid, command: 'python3 /root/script.py', path: '/root/gone.txt' },
    ]);
    expect(blocked.message).toMatch(
      new RegExp(`process ${pid} \\(python3 /root/script.py\\) holds the deleted /root/`),
    );
    // Still running, still counting; once the holder ends, the pause succeeds.
    const count = Number(await countAbove(id, 0));
    await countAbove(id, count + 3);
    expect((await sh(id, `kill ${pid}`)).exitCode).toBe(0);
    await driver.pause(id);
    await driver.resume(options(id));
  });

  it("gives /tmp half the sandbox's memory: a bigger write fails with ENOSPC and the sandbox lives", async () => {
    const id = testSandboxId();
    created.add(id);
    await driver.create(options(id));
    const df = await sh(id, 'df -m /tmp | tail -1');
    expect(df.stdout).toMatch(/^\S+\s+128\s/);
    const fill = await sh(id, 'head -c 200M /dev/zero > /tmp/big; echo "rc=$?"; stat -c %s /tmp/big');
    expect(fill.stderr).toMatch(/No space left on device/);
    expect(fill.stdout.split('\n')).toEqual(['rc=1', String(128 * 1024 * 1024)]);
    expect((await sh(id, 'rm /tmp/big && echo alive')).stdout).toBe('alive');
    // The files of /tmp are the sandbox's own: the host's view of its disk does not have them.
    await sh(id, 'echo inside > /tmp/only-inside');
    await expect(stat(join(driver.rootDir(id), 'tmp/only-inside'))).rejects.toThrow(/ENOENT/);
  });
});
