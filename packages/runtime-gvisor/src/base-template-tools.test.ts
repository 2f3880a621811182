import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SandboxFs } from '@burrow/runtime';
import { testSandboxId } from '@burrow/runtime/conformance';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GvisorDriver } from './gvisor-driver.js';
import { buildTemplate } from './template-builder.js';
import { buildTestWheel } from './test-support/test-wheel.js';

/** Shared test cache of templates (the base template is built once per machine). */
const TEST_TEMPLATES_DIR = '/var/tmp/burrow-test-templates';
const PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
const AGENT = { uid: 1000, gid: 1000 };

/** The tools agents expect in `base`: pip for root and any user (no PEP 668 refusal), node, npm, git, curl. */
describe('base template tools', () => {
  let dataDir: string;
  let wheelsDir: string;
  let driver: GvisorDriver;
  const sandboxId = testSandboxId();

  const run = async (argv: string[], user: 'root' | 'agent' = 'root') => {
    const env = { PATH, HOME: user === 'root' ? '/root' : '/home/agent' };
    const process = await driver.exec(sandboxId, {
      argv,
      env,
      cwd: '/',
      ...(user === 'agent' ? { user: AGENT } : {}),
    });
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    process.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
    process.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
    process.stdin.end();
    const exit = await process.exited;
    return { ...exit, stdout: Buffer.concat(stdout).toString(), stderr: Buffer.concat(stderr).toString() };
  };

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'burrow-base-tools-'));
    wheelsDir = await mkdtemp(join(tmpdir(), 'burrow-base-tools-wheels-'));
    const template = await buildTemplate({ templatesDir: TEST_TEMPLATES_DIR, apt: [], run: [] });
    driver = new GvisorDriver({ dataDir, maxProcesses: 256 });
    await driver.create({
      sandboxId,
      template,
      resources: { cpuCount: 1, memoryMiB: 512, diskMiB: 1024 },
      hostname: 'base-tools',
    });
  }, 900_000);

  afterAll(async () => {
    await driver?.delete(sandboxId);
    await driver?.close();
    await rm(dataDir, { recursive: true, force: true });
    await rm(wheelsDir, { recursive: true, force: true });
  });

  it('has no EXTERNALLY-MANAGED marker, also for packages dpkg installs later', async () => {
    const marker = await run(['sh', '-c', 'ls /usr/lib/python3*/EXTERNALLY-MANAGED']);
    expect(marker.exitCode).not.toBe(0);
    const dpkg = await run(['cat', '/etc/dpkg/dpkg.cfg.d/99mmdebstrap']);
    expect(dpkg.stdout).toContain('path-exclude=/usr/lib/python3*/EXTERNALLY-MANAGED');
  });

  it('pip installs a wheel written through the files API as root, into the system site', async () => {
    const wheel = await buildTestWheel({ dir: wheelsDir, name: 'burrow-root-probe' });
    const fs = new SandboxFs(driver.rootDir(sandboxId));
    await fs.write(`/var/tmp/${wheel.fileName}`, await readFile(wheel.path), { mode: 0o644 });
    const install = await run(['python3', '-m', 'pip', 'install', '--no-index', `/var/tmp/${wheel.fileName}`]);
    expect(install.exitCode, install.stderr).toBe(0);
    const imported = await run([
      'python3',
      '-c',
      `import ${wheel.module}; print(${wheel.module}.VALUE, ${wheel.module}.__file__)`,
    ]);
    expect(imported.stdout).toMatch(new RegExp(`^${wheel.value} /usr/local/lib/python3\\.[0-9]+/dist-packages/`));
    // Every user sees what root installed.
    const asAgent = await run(['python3', '-c', `import ${wheel.module}; print(${wheel.module}.VALUE)`], 'agent');
    expect(asAgent.stdout.trim()).toBe(wheel.value);
  });

  it('pip installs as a non-root user, into the user site (~/.local)', async () => {
    const useradd = await run(['useradd', '--create-home', '--uid', '1000', '--user-group', 'agent']);
    expect(useradd.exitCode, useradd.stderr).toBe(0);
    const wheel = await buildTestWheel({ dir: wheelsDir, name: 'burrow-user-probe' });
    const fs = new SandboxFs(driver.rootDir(sandboxId));
    await fs.write(`/var/tmp/${wheel.fileName}`, await readFile(wheel.path), { mode: 0o644 });
    const install = await run(['python3', '-m', 'pip', 'install', '--no-index', `/var/tmp/${wheel.fileName}`], 'agent');
    expect(install.exitCode, install.stderr).toBe(0);
    const imported = await run(
      ['python3', '-c', `import ${wheel.module}; print(${wheel.module}.VALUE, ${wheel.module}.__file__)`],
      'agent',
    );
    expect(imported.stdout).toMatch(
      new RegExp(`^${wheel.value} /home/agent/\\.local/lib/python3\\.[0-9]+/site-packages/`),
    );
    expect((await run(['python3', '-c', `import ${wheel.module}`])).exitCode).not.toBe(0);
  });

  it('runs node, npm, git and curl', async () => {
    const node = await run(['node', '-e', 'console.log(process.versions.node.split(".")[0], 6 * 7)']);
    expect(node.stdout).toMatch(/^[0-9]+ 42\n$/);
    const npm = await run(['npm', '--version'], 'agent');
    expect(npm.exitCode, npm.stderr).toBe(0);
    expect(npm.stdout).toMatch(/^[0-9]+\.[0-9]+\.[0-9]+\n$/);
    const git = await run(['git', '--version']);
    expect(git.stdout).toMatch(/^git version 2\./);
    const curl = await run(['curl', '--version']);
    expect(curl.stdout).toMatch(/^curl [0-9]/);
  });
});
