import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInSandbox, testSandboxId } from '@burrow/runtime/conformance';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { GvisorDriver } from './gvisor-driver.js';
import { cgroupParentHash } from './sandbox-cgroups.js';
import { buildTemplate } from './template-builder.js';

// Real runsc. The host has 2 CPUs here: cpuCount 1 is the case that tells the sandbox's count from the host's.
const TEST_TEMPLATES_DIR = '/var/tmp/burrow-test-templates';
const PROBE = 'nproc; getconf _NPROCESSORS_ONLN; python3 -c "import os; print(len(os.sched_getaffinity(0)))"';

describe('the CPUs a sandbox sees are its cpuCount (gVisor)', () => {
  let dataDir: string;
  let driver: GvisorDriver;
  let template: Awaited<ReturnType<typeof buildTemplate>>;
  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'burrow-cpu-count-'));
    template = await buildTemplate({ templatesDir: TEST_TEMPLATES_DIR, apt: [], run: [] });
    driver = new GvisorDriver({ dataDir, maxProcesses: 256 });
  }, 600_000);
  afterAll(async () => {
    await driver?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  const probe = async (sandboxId: string) =>
    (await runInSandbox(driver, sandboxId, ['sh', '-c', PROBE])).stdout.toString().trim().split('\n');

  test.each([1, 2])(
    'cpuCount %i: nproc, sysconf and the affinity mask, also after pause and resume',
    async (cpuCount) => {
      const sandboxId = testSandboxId();
      const options = { sandboxId, template, resources: { cpuCount, memoryMiB: 256, diskMiB: 512 }, hostname: 'cpus' };
      try {
        await driver.create(options);
        const expected = [String(cpuCount), String(cpuCount), String(cpuCount)];
        expect(await probe(sandboxId)).toEqual(expected);
        // Booted on cpuCount CPUs, then free to run on every host CPU (the quota is the limit).
        const cpuset = join('/sys/fs/cgroup/cpuset/burrow', cgroupParentHash(dataDir), sandboxId, 'cpuset.cpus');
        expect((await readFile(cpuset, 'utf8')).trim()).toBe(
          availableParallelism() === 1 ? '0' : `0-${availableParallelism() - 1}`,
        );
        await driver.pause(sandboxId);
        await driver.resume(options);
        expect(await probe(sandboxId)).toEqual(expected);
      } finally {
        await driver.delete(sandboxId);
      }
    },
    180_000,
  );
});
