import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runDriverConformance } from '@burrow/runtime/conformance';
import { GvisorDriver } from './gvisor-driver.js';
import { cgroupChildren, findSandboxCgroups, loopDevicesUnder, mountsUnder } from './host-plumbing.js';
import { RunscCli } from './runsc-cli.js';
import { cgroupParentHash } from './sandbox-cgroups.js';
import { buildTemplate } from './template-builder.js';

/** Shared test cache of templates: the base template is built once and reused by every test run. */
const TEST_TEMPLATES_DIR = '/var/tmp/burrow-test-templates';

runDriverConformance('gvisor', async () => {
  const dataDir = await mkdtemp(join(tmpdir(), 'burrow-gvisor-test-'));
  const template = await buildTemplate({ templatesDir: TEST_TEMPLATES_DIR, apt: [], run: [] });
  const driver = new GvisorDriver({ dataDir, maxProcesses: 256 });
  const runsc = new RunscCli('runsc', join(dataDir, 'runsc'), 'systrap');
  return {
    driver,
    template,
    async leftovers(sandboxId) {
      const dir = join(dataDir, 'sandboxes', sandboxId);
      const found: string[] = [];
      if ((await runsc.list()).includes(sandboxId)) found.push('runsc container');
      found.push(...(await mountsUnder(dir)), ...(await loopDevicesUnder(dir)));
      found.push(...(await findSandboxCgroups('/sys/fs/cgroup', sandboxId)));
      return found;
    },
    async cleanup() {
      // Only this data dir's sandboxes: the host's /burrow cgroups may hold other test runs' sandboxes.
      const ours = new Set([...(await runsc.list()), ...(await readdir(join(dataDir, 'sandboxes')).catch(() => []))]);
      for (const sandboxId of ours) await driver.delete(sandboxId);
      const left = await readdir(join(dataDir, 'sandboxes')).catch(() => []);
      // close() removes this instance's cgroup parent `burrow/<hash>` (otherwise each CI run leaves one behind).
      await driver.close();
      // In any controller (cpu, memory, pids, ...), and its owner record.
      const parent = (await cgroupChildren('/sys/fs/cgroup', 'burrow')).includes(cgroupParentHash(dataDir));
      const owner = await readdir('/run/burrow/cgroup-parents').then(
        (names) => names.includes(cgroupParentHash(dataDir)),
        () => false,
      );
      await rm(dataDir, { recursive: true, force: true });
      if (left.length > 0) throw new Error(`sandbox dirs left behind: ${left.join(', ')}`);
      if (parent || owner) {
        throw new Error(`cgroup parent burrow/${cgroupParentHash(dataDir)} left behind (owner record: ${owner})`);
      }
    },
  };
});
