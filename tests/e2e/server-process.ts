/**
 * Helpers for tests that run a REAL `burrow server` process (real runsc, real SQLite) on a temp data dir, kill it
 * and restart it on the same data dir: set the data dir up, start the process, and scan the host for resources
 * no row explains (runsc containers, mounts, loop devices, cgroups, directories).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GvisorDriver } from '@burrow/runtime-gvisor';
import { findSandboxCgroups, loopDevicesUnder, mountsUnder } from '../../packages/runtime-gvisor/src/host-plumbing.js';
import { RunscCli } from '../../packages/runtime-gvisor/src/runsc-cli.js';
import { TEST_TEMPLATES_DIR } from './burrow-test-server.js';

/** The built CLI entry (`burrow`). */
export const CLI_BIN = fileURLToPath(new URL('../../packages/cli/bundle/bin.js', import.meta.url));

/** A started `burrow server` process. */
export interface ServerProcess {
  url: string;
  /** The last 8000 characters the server wrote to stderr (warnings and errors), for failure messages. */
  log: () => string;
  child: ChildProcess;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Whether the process has not exited yet. */
export function isAlive(server: ServerProcess): boolean {
  return server.child.exitCode === null && server.child.signalCode === null;
}

/**
 * Make a temp data dir and run `burrow setup` on it (registers the cached base template, writes the admin key).
 * @returns the data dir and its admin key.
 */
export async function setupDataDir(prefix: string): Promise<{ dataDir: string; adminKey: string }> {
  const dataDir = mkdtempSync(join(tmpdir(), prefix));
  const setup = spawn(process.execPath, [CLI_BIN, 'setup', '--data-dir', dataDir], {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', BURROW_TEMPLATES_DIR: TEST_TEMPLATES_DIR },
    stdio: 'ignore',
  });
  const code = await new Promise((done) => setup.on('exit', done));
  if (code !== 0) throw new Error(`burrow setup exited ${String(code)}`);
  return { dataDir, adminKey: readFileSync(join(dataDir, 'admin-key'), 'utf8').trim() };
}

/**
 * Start `burrow server` on `dataDir` (port 0, no warm pool, reconcile every second) and wait until it listens.
 * @param options.env extra environment (for example `BURROW_TEST_CRASH_AT`)
 * @param options.startTimeoutMs how long to wait for "listening", ms. @default 90_000
 * @throws when it exits or does not listen in time (the message carries its stderr).
 */
export function startServerProcess(options: {
  dataDir: string;
  env?: Record<string, string> | undefined;
  startTimeoutMs?: number | undefined;
}): Promise<ServerProcess> {
  const child = spawn(process.execPath, [CLI_BIN, 'server', '--data-dir', options.dataDir], {
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      BURROW_TEMPLATES_DIR: TEST_TEMPLATES_DIR,
      BURROW_PORT: '0',
      BURROW_E2B_API_PORT: '0',
      BURROW_E2B_ENVD_PORT: '0',
      BURROW_WARM_POOL: 'none',
      BURROW_LOG_LEVEL: process.env.BURROW_TEST_LOG ?? 'warn',
      BURROW_RECONCILE_INTERVAL_MS: '1000',
      ...options.env,
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) =>
    child.on('exit', (code, signal) => done({ code, signal })),
  );
  const startTimeoutMs = options.startTimeoutMs ?? 90_000;
  return new Promise((ready, fail) => {
    let stderr = '';
    const timer = setTimeout(
      () => fail(new Error(`the server did not start in ${startTimeoutMs} ms:\n${stderr}`)),
      startTimeoutMs,
    );
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (chunk: string) => {
      stderr += chunk;
      if (stderr.length > 200_000) stderr = stderr.slice(-100_000);
      if (process.env.BURROW_TEST_LOG) process.stderr.write(chunk);
      const url = stderr.match(/listening on (http:\/\/\S+)/)?.[1];
      if (url) {
        clearTimeout(timer);
        ready({ url, child, exited, log: () => stderr.slice(-8000) });
      }
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      fail(new Error(`the server exited (${code ?? signal}) before listening:\n${stderr}`));
    });
  });
}

/** Stop the process: SIGTERM, then SIGKILL after `graceMs` (default 10 s). */
export async function stopServerProcess(server: ServerProcess | null, graceMs = 10_000): Promise<void> {
  if (server === null || !isAlive(server)) return;
  server.child.kill('SIGTERM');
  await Promise.race([server.exited, new Promise((r) => setTimeout(r, graceMs))]);
  if (isAlive(server)) server.child.kill('SIGKILL');
  await server.exited;
}

/** The cgroup parent name (12 hex) of the instance on `dataDir`, as the driver derives it. */
export function instanceCgroupName(dataDir: string): string {
  return createHash('sha256').update(resolve(dataDir)).digest('hex').slice(0, 12);
}

/**
 * Host resources of the instance on `dataDir` that its rows do not explain. `rows` maps each sandbox id to its
 * state. Only `running` rows may have a runsc container, mounts, loop devices or cgroups; every row has a
 * directory and every directory a row; no fork image is left; a pause image only for a `paused` row. With
 * `expectContainers`, a `running` row without a runsc container is a problem too.
 * @returns one line per problem, empty when the host matches the rows.
 */
export async function hostProblems(
  dataDir: string,
  rows: ReadonlyMap<string, string>,
  options: { expectContainers?: boolean } = {},
): Promise<string[]> {
  const sandboxesDir = join(dataDir, 'sandboxes');
  const runsc = new RunscCli('runsc', join(dataDir, 'runsc'), 'systrap');
  const cgroupParent = instanceCgroupName(dataDir);
  const problems: string[] = [];
  const containers = await runsc.list();
  for (const id of containers) if (rows.get(id) !== 'running') problems.push(`${id}: runsc container`);
  if (options.expectContainers) {
    for (const [id, state] of rows) {
      if (state === 'running' && !containers.includes(id)) problems.push(`${id}: running row without a container`);
    }
  }
  for (const point of await mountsUnder(sandboxesDir)) {
    const id = point.slice(sandboxesDir.length + 1).split('/')[0] ?? '';
    if (rows.get(id) !== 'running') problems.push(`${id}: mount ${point}`);
  }
  for (const device of await loopDevicesUnder(sandboxesDir)) {
    // A device detached between the listing and this read (an error sandbox's release, seed 934891877) is no leak.
    let backing: string;
    try {
      backing = readFileSync(`/sys/block/${device.slice(5)}/loop/backing_file`, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw error;
    }
    const id = backing.slice(sandboxesDir.length + 1).split('/')[0] ?? '';
    if (rows.get(id) !== 'running') problems.push(`${id}: loop device ${device}`);
  }
  const dirs = await readdir(sandboxesDir).catch(() => [] as string[]);
  for (const id of dirs) {
    if (!rows.has(id)) problems.push(`${id}: directory without a row`);
    const inside = existsSync(join(sandboxesDir, id)) ? readdirSync(join(sandboxesDir, id)) : [];
    for (const name of inside.filter((n) => n.startsWith('fork-'))) problems.push(`${id}: fork image ${name}`);
    if (inside.includes('checkpoint') && rows.get(id) !== 'paused')
      problems.push(`${id}: pause image while not paused`);
  }
  for (const id of rows.keys()) {
    if (!dirs.includes(id)) problems.push(`${id}: row without a directory`);
    const cgroups = (await findSandboxCgroups('/sys/fs/cgroup', id)).filter((d) => d.includes(cgroupParent));
    if (rows.get(id) !== 'running' && cgroups.length > 0) problems.push(`${id}: cgroups ${cgroups.join(' ')}`);
  }
  for (const dir of await readdir(join('/sys/fs/cgroup/pids/burrow', cgroupParent)).catch(() => [] as string[])) {
    if (dir.startsWith('sbx_') && !rows.has(dir)) problems.push(`${dir}: pids cgroup without a row`);
  }
  // Networks (namespaces `burrow-<hash>-<id>-g|r`, the host link, the address slot) live until the sandbox is deleted.
  const netnsPrefix = `burrow-${cgroupParent}-`;
  for (const name of await readdir('/run/netns').catch(() => [] as string[])) {
    const id = name.startsWith(netnsPrefix) ? name.slice(netnsPrefix.length, -2) : null;
    if (id !== null && !rows.has(id)) problems.push(`${id}: network namespace ${name} without a row`);
  }
  for (const slot of await readdir('/run/burrow/net-slots').catch(() => [] as string[])) {
    const [hash, id] = readFileSync(join('/run/burrow/net-slots', slot), 'utf8').trim().split(' ');
    if (hash === cgroupParent && id !== undefined && !rows.has(id))
      problems.push(`${id}: network address slot ${slot}`);
  }
  for (const link of readdirSync('/sys/class/net')) {
    const alias = existsSync(`/sys/class/net/${link}/ifalias`)
      ? readFileSync(`/sys/class/net/${link}/ifalias`, 'utf8')
      : '';
    const [tag, hash, id] = alias.trim().split(':');
    if (tag === 'burrow' && hash === cgroupParent && id !== undefined && !rows.has(id))
      problems.push(`${id}: link ${link}`);
  }
  return problems;
}

/**
 * After a test: delete every sandbox the driver still finds on `dataDir` (whatever a failed assertion left) and
 * remove the data dir.
 */
export async function removeDataDir(dataDir: string): Promise<void> {
  if (dataDir === '') return;
  const driver = new GvisorDriver({ dataDir, network: {} });
  for (const id of (await driver.listHostResources()).sandboxIds) await driver.delete(id).catch(() => undefined);
  // Its cgroup parent burrow/<hash> too (removed when empty), so test runs leave none behind.
  await driver.close();
  rmSync(dataDir, { recursive: true, force: true });
}
