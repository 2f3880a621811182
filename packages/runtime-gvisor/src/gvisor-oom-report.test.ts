import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInSandbox, testSandboxId } from '@burrow/runtime/conformance';
import { afterAll, expect, it } from 'vitest';
import { GvisorDriver } from './gvisor-driver.js';
import { buildTemplate } from './template-builder.js';

const TEST_TEMPLATES_DIR = '/var/tmp/burrow-test-templates';
const HOG = ['python3', '-c', 'b = bytearray(1 << 30)\nfor i in range(0, len(b), 4096): b[i] = 1'];

let dataDir = '';
afterAll(async () => {
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

it('reports one OOM kill once, also across a driver restart (real runsc)', { timeout: 300_000 }, async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'burrow-oom-report-'));
  const template = await buildTemplate({ templatesDir: TEST_TEMPLATES_DIR, apt: [], run: [] });
  const first = new GvisorDriver({ dataDir, maxProcesses: 256 });
  const sandboxId = testSandboxId();
  await first.create({ sandboxId, template, resources: { cpuCount: 1, memoryMiB: 256, diskMiB: 512 }, hostname: 'h' });
  // The server that restarts: a second driver on the same data dir, as `burrow server` after a restart.
  const second = new GvisorDriver({ dataDir, maxProcesses: 256 });
  try {
    expect((await runInSandbox(first, sandboxId, HOG)).exitCode).not.toBe(0);
    const types = async (driver: GvisorDriver) => (await driver.observe(sandboxId)).events.map((e) => e.type);
    expect(await types(first)).toContain('OOMKilled');
    expect(await types(first)).not.toContain('OOMKilled');
    expect(await types(second)).not.toContain('OOMKilled');
    expect((await runInSandbox(second, sandboxId, HOG)).exitCode).not.toBe(0);
    expect(await types(second)).toContain('OOMKilled');
  } finally {
    await second.delete(sandboxId);
    await first.close();
    await second.close();
  }
});
