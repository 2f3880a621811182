import { execFileSync } from 'node:child_process';
import { mkdtemp, open, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Resources } from '@burrow/contract';
import { CheckpointRejectedError, type TemplateRef } from '@burrow/runtime';
import { runInSandbox, testSandboxId } from '@burrow/runtime/conformance';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { GvisorDriver } from './gvisor-driver.js';
import { findSandboxCgroups, loopDevicesUnder, mountsUnder, runtimeProcesses } from './host-plumbing.js';
import { RunscCli } from './runsc-cli.js';
import { SPAWN_FIFO, SPAWN_READY_MARK } from './spawner.js';
import { buildTemplate } from './template-builder.js';

const TEST_TEMPLATES_DIR = '/var/tmp/burrow-test-templates';
const RESOURCES: Resources = { cpuCount: 1, memoryMiB: 256, diskMiB: 512 };

/** A server holding a counter in memory: each GET returns the next value and the server's pid. */
const COUNTER_SERVER = `
import http.server, os
n = 0
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global n
        n += 1
        body = f"{n} {os.getpid()}".encode()
        self.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer(('127.0.0.1', 8080), H).serve_forever()
`;
const ASK = [
  'python3',
  '-c',
  // Bounded: a request that hangs fails the test in 20 s instead of waiting out the test's timeout.
  'import urllib.request;print(urllib.request.urlopen("http://127.0.0.1:8080", timeout=20).read().decode())',
];
/**
 * Write a `runsc` wrapper script into `dir` that runs the shell `action` (with `"$@"` the runsc arguments) when
 * `subcommand` is one of its arguments, and runs runsc unchanged otherwise (or after an action that does not exit).
 * @returns the wrapper's path, for `GvisorDriver`'s `runscPath`
 */
async function runscWrapper(dir: string, subcommand: string, action: string): Promise<string> {
  const path = join(dir, 'runsc');
  const script = `#!/bin/sh\nfor a in "$@"; do\n  if [ "$a" = ${subcommand} ]; then\n    ${action}\n  fi\ndone\nexec runsc "$@"\n`;
  await writeFile(path, script, { mode: 0o755 });
  return path;
}

/** Exits 0 once something listens on 127.0.0.1:8080 (0x1F90) inside the sandbox. */
const LISTENING = ['sh', '-c', "grep -q '0100007F:1F90 00000000:0000 0A' /proc/net/tcp"];

describe('GvisorDriver pause, resume, stop, fork, snapshots (real runsc)', { timeout: 300_000 }, () => {
  let dataDir: string;
  let driver: GvisorDriver;
  let runsc: RunscCli;
  let template: TemplateRef;
  const created = new Set<string>();

  const options = (sandboxId: string) => ({
    sandboxId,
    template,
    resources: RESOURCES,
    hostname: `h-${sandboxId.slice(4, 10)}`,
  });
  const sh = async (id: string, script: string) => {
    const run = await runInSandbox(driver, id, ['sh', '-c', script]);
    if (run.exitCode !== 0) throw new Error(`${script} failed: ${run.stderr.toString()}`);
    return run.stdout.toString().trim();
  };
  const create = async () => {
    const id = testSandboxId();
    created.add(id);
    await driver.create(options(id));
    return id;
  };
  const startCounter = async (id: string) => {
    await writeFile(join(driver.rootDir(id), 'root/counter.py'), COUNTER_SERVER);
    // Started from the init's tree: processes descended from an exec end when gVisor restores an image.
    await driver.spawn(id, { argv: ['python3', '/root/counter.py'], env: { PATH: '/usr/bin:/bin' }, cwd: '/root' });
    // Under load the first request can hang (issue 3): a `runsc exec` of the client that never gets an answer
    // from a counter server still starting (runsc debug log: WaitPID until the sandbox is deleted), with no
    // checkpoint command involved. So: ask only once the server listens, bound every request (ASK's timeout),
    // and retry only this first one (which may then count 2).
    let failures = '';
    for (let i = 0; i < 300; i++) {
      if ((await runInSandbox(driver, id, LISTENING)).exitCode === 0) {
        const run = await runInSandbox(driver, id, ASK);
        if (run.exitCode === 0) return run.stdout.toString().trim().split(' ').map(Number) as [number, number];
        failures += run.stderr.toString().slice(-300);
        if (failures.length > 900) throw new Error(`counter server did not answer: ${failures}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('counter server did not start listening');
  };
  const ask = async (id: string) =>
    (await sh(id, ASK.map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' '))).split(' ').map(Number);
  const leftovers = async (id: string) => {
    const dir = join(dataDir, 'sandboxes', id);
    const found: string[] = [];
    if ((await runsc.list()).includes(id)) found.push('runsc container');
    found.push(...(await mountsUnder(dir)), ...(await loopDevicesUnder(dir)));
    found.push(...(await findSandboxCgroups('/sys/fs/cgroup', id)));
    return found;
  };

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'burrow-checkpoint-test-'));
    template = await buildTemplate({ templatesDir: TEST_TEMPLATES_DIR, apt: [], run: [] });
    driver = new GvisorDriver({ dataDir, maxProcesses: 256 });
    runsc = new RunscCli('runsc', join(dataDir, 'runsc'), 'systrap');
  });

  afterEach(async () => {
    for (const id of created) await driver.delete(id);
    created.clear();
  });

  afterAll(async () => {
    const ours = new Set([...(await runsc.list()), ...(await readdir(join(dataDir, 'sandboxes')).catch(() => []))]);
    for (const id of ours) await driver.delete(id);
    await rm(dataDir, { recursive: true, force: true });
  });

  it('declares checkpoint and fork', () => {
    expect([...driver.capabilities].sort()).toEqual(['checkpoint', 'fork']);
  });

  it('a spawn request made before the spawner FIFO exists waits for it and never stops the sandbox', async () => {
    // Deterministic form of a race after create: a request that creates a plain file at the FIFO's path makes
    // the init's loop read it to its end and exit, and the sandbox stops.
    const id = await create();
    // The init makes the FIFO, then its ready mark, shortly after create (that gap is the race): wait for the mark,
    // then take both away, as they are before the init got there.
    await sh(id, `while [ ! -e ${SPAWN_READY_MARK} ]; do sleep 0.02; done; rm ${SPAWN_FIFO} ${SPAWN_READY_MARK}`);
    const request = driver.spawn(id, { argv: ['true'], env: {}, cwd: '/' });
    await new Promise((r) => setTimeout(r, 300));
    expect(await sh(id, `[ -e ${SPAWN_FIFO} ] && echo exists || echo absent`)).toBe('absent');
    // Stand in for the spawner: make the FIFO and take one request from it.
    await sh(id, `mkfifo -m 600 ${SPAWN_FIFO}; read -r line < ${SPAWN_FIFO}; printf '%s' "$line" > /root/request`);
    await request;
    expect(await sh(id, 'cat /root/request')).toBe("cd '/' && exec env -i  'true'");
    expect((await driver.observe(id)).status).toBe('running');
  });

  it('RunscCli.state read from the state file agrees with `runsc state` (running, paused, killed)', async () => {
    const id = await create();
    const raw = () => {
      const out = execFileSync('runsc', ['--root', join(dataDir, 'runsc'), 'state', id], { encoding: 'utf8' });
      const { status, pid } = JSON.parse(out) as { status: string; pid: number };
      return { id, status, pid };
    };
    expect(await runsc.state(id)).toEqual(raw());
    expect((await runsc.state(id))?.status).toBe('running');
    execFileSync('runsc', ['--root', join(dataDir, 'runsc'), 'pause', id]);
    expect(await runsc.state(id)).toEqual({ ...raw(), status: 'paused' });
    // Held still, then its sentry dies: runsc keeps saying paused; we say stopped.
    const held = await create();
    execFileSync('runsc', ['--root', join(dataDir, 'runsc'), 'pause', held]);
    process.kill((await runsc.state(held))?.pid ?? 0, 'SIGKILL');
    for (let i = 0; i < 200 && (await runsc.state(held))?.status !== 'stopped'; i++)
      await new Promise((r) => setTimeout(r, 20));
    expect((await runsc.state(held))?.status).toBe('stopped');
    execFileSync('runsc', ['--root', join(dataDir, 'runsc'), 'resume', id]);
    const { pid } = raw();
    process.kill(pid, 'SIGKILL');
    for (let i = 0; i < 200 && (await runsc.state(id))?.status !== 'stopped'; i++)
      await new Promise((r) => setTimeout(r, 20));
    expect(await runsc.state(id)).toEqual({ ...raw(), status: 'stopped' });
    expect(await runsc.state('sbx_not_there')).toBeNull();
  });

  it('30 pause/resume cycles keep files byte-exact, the in-memory counter and the server pid', async () => {
    const id = await create();
    const [first, pid] = await startCounter(id);
    let expected = first;
    const root = driver.rootDir(id);
    const written = new Map<string, Buffer>();
    for (let cycle = 0; cycle < 30; cycle++) {
      const bytes = Buffer.from([...Array(2000)].map((_, i) => (i * 31 + cycle * 7) % 256));
      await writeFile(join(root, `root/file-${cycle}.bin`), bytes);
      written.set(`file-${cycle}.bin`, bytes);
      // Written inside, right before the pause, without fsync.
      await sh(id, `printf 'cycle %s' ${cycle} > /root/last.txt`);
      const info = await driver.pause(id);
      expect(info.imageSizeBytes).toBeGreaterThan(0);
      expect((await driver.observe(id)).status).toBe('paused');
      expect(await mountsUnder(join(dataDir, 'sandboxes', id))).toEqual([]);
      await driver.resume(options(id));
      expect(await readFile(join(driver.rootDir(id), 'root/last.txt'), 'utf8')).toBe(`cycle ${cycle}`);
      const [n, samePid] = await ask(id);
      expected += 1;
      expect(n).toBe(expected);
      expect(samePid).toBe(pid);
    }
    for (const [name, bytes] of written) expect(await readFile(join(driver.rootDir(id), 'root', name))).toEqual(bytes);
    const ps = await sh(id, 'ps -eo pid,args');
    expect(ps).toMatch(new RegExp(`^\\s*${pid}\\s+python3 /root/counter.py`, 'm'));
  });

  it('pause and resume are idempotent', async () => {
    const id = await create();
    await sh(id, 'echo kept > /root/kept');
    await driver.pause(id);
    await driver.pause(id);
    await driver.resume(options(id));
    await driver.resume(options(id));
    expect(await sh(id, 'cat /root/kept')).toBe('kept');
  });

  it('a gofer that dies before the end of the checkpoint fails the pause, with no pause image left', async () => {
    // A gofer killed during a pause must not yield a pause that answers ok while every resume fails ("stopped
    // right after restore"): the image would save a sandbox that can open no file (reproduced by chaos seed
    // 149856408). A wrapper kills the gofer as `runsc checkpoint` ends, before the driver goes on.
    const dir = await mkdtemp(join(tmpdir(), 'burrow-gofer-dies-'));
    const goferPidFile = join(dir, 'gofer.pid');
    const wrapper = await runscWrapper(
      dir,
      'checkpoint',
      `runsc "$@"; rc=$?; kill -9 "$(cat "${goferPidFile}")"; exit $rc`,
    );
    const wrapped = new GvisorDriver({ dataDir: join(dir, 'data'), maxProcesses: 256, runscPath: wrapper });
    const id = testSandboxId();
    try {
      await wrapped.create(options(id));
      const pidsCgroup = (await findSandboxCgroups('/sys/fs/cgroup', id)).find((d) => d.includes('/pids/')) ?? '';
      const gofer = (await runtimeProcesses(pidsCgroup)).find((p) => p.role === 'gofer')?.pid ?? 0;
      expect(gofer).toBeGreaterThan(0);
      await writeFile(goferPidFile, String(gofer));
      await expect(wrapped.pause(id)).rejects.toThrow(/gofer/);
      expect((await wrapped.observe(id)).status).not.toBe('paused');
      expect(await readdir(join(dir, 'data', 'sandboxes', id, 'checkpoint')).catch(() => [])).toEqual([]);
    } finally {
      await wrapped.delete(id).catch(() => undefined);
      await wrapped.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('refuses a tampered, truncated or foreign image and stays paused and intact', async () => {
    const id = await create();
    const [first] = await startCounter(id);
    await driver.pause(id);
    // The checksums are taken after the pause answered; an image altered before that could never be verified.
    await driver.checksummed(id);
    const manifestPath = join(dataDir, 'sandboxes', id, 'checkpoint/manifest.json');
    expect(JSON.parse(await readFile(manifestPath, 'utf8')).checksumsPending).toBeUndefined();
    const pages = join(dataDir, 'sandboxes', id, 'checkpoint/image/pages.img');
    const original = await readFile(pages);
    const flipped = Buffer.from(original);
    flipped[Math.floor(flipped.length / 2)] = (flipped[Math.floor(flipped.length / 2)] ?? 0) ^ 0xff;
    await writeFile(pages, flipped);
    await expect(driver.resume(options(id))).rejects.toThrow(CheckpointRejectedError);
    await expect(driver.resume(options(id))).rejects.toThrow(/checksum/);
    expect((await driver.observe(id)).status).toBe('paused');
    expect(await leftovers(id)).toEqual([]);
    await writeFile(pages, original.subarray(0, original.length - 4096));
    await expect(driver.resume(options(id))).rejects.toThrow(/truncated/);
    await writeFile(pages, original);
    const manifestText = await readFile(manifestPath, 'utf8');
    await writeFile(manifestPath, manifestText.replace(/runsc version [^"]+/, 'runsc version 0.0~20200101.0'));
    await expect(driver.resume(options(id))).rejects.toThrow(/cannot restore it/);
    await writeFile(manifestPath, manifestText);
    // The disk is checksummed too.
    const disk = await open(join(dataDir, 'sandboxes', id, 'disk.img'), 'r+');
    const block = Buffer.alloc(4096);
    await disk.read(block, 0, 4096, 0);
    await disk.write(Buffer.from('tampered'), 0, 8, 0);
    await expect(driver.resume(options(id))).rejects.toThrow(/disk image does not match/);
    await disk.write(block, 0, 4096, 0);
    await disk.close();
    await driver.resume(options(id));
    expect((await ask(id))[0]).toBe(first + 1);
  });

  it('a restore that fails leaves the image restorable: a retry resumes with memory and files', async () => {
    // One `runsc restore` failure (initFromOptions: bad file number, under load) mounts and unmounts the verified
    // disk, which changes its bytes (ext4 mount times); unless it is sealed again every retry is refused as
    // "altered" and the sandbox's memory is lost. A runsc wrapper fails the first restore on purpose here.
    const flakyDir = await mkdtemp(join(tmpdir(), 'burrow-flaky-restore-'));
    const marker = join(flakyDir, 'fail-next-restore');
    const wrapper = await runscWrapper(
      flakyDir,
      'restore',
      `if rm "${marker}" 2>/dev/null; then echo 'injected restore failure' >&2; exit 128; fi`,
    );
    const flaky = new GvisorDriver({ dataDir: join(flakyDir, 'data'), maxProcesses: 256, runscPath: wrapper });
    const id = testSandboxId();
    try {
      await flaky.create(options(id));
      await writeFile(join(flaky.rootDir(id), 'root/kept'), 'kept\n');
      await flaky.spawn(id, { argv: ['sleep', '1000'], env: { PATH: '/usr/bin:/bin' }, cwd: '/root' });
      await flaky.pause(id);
      await writeFile(marker, '');
      await expect(flaky.resume(options(id))).rejects.toThrow(/restore failed/);
      await flaky.resume(options(id));
      expect((await flaky.observe(id)).status).toBe('running');
      const run = await runInSandbox(flaky, id, [
        'sh',
        '-c',
        'cat /root/kept; pgrep -x sleep >/dev/null && echo alive',
      ]);
      expect(run.stdout.toString()).toBe('kept\nalive\n');
    } finally {
      await flaky.delete(id).catch(() => undefined);
      await rm(flakyDir, { recursive: true, force: true });
    }
  });

  it('settle releases a container a crash left between runsc create and start, never one of a create under way', async () => {
    // A server killed between runsc create and start leaves the container `created`; a restarted server must not
    // take it as running, or nothing ever starts it (reproduced by chaos seed 1557491096, killed 182 ms in).
    // A wrapper holds `runsc start` here, as the crash did.
    const dir = await mkdtemp(join(tmpdir(), 'burrow-held-start-'));
    const holdPid = join(dir, 'hold.pid');
    const wrapper = await runscWrapper(dir, 'start', `echo $$ > "${holdPid}"; exec sleep 600`);
    const dataDir2 = join(dir, 'data');
    const first = new GvisorDriver({ dataDir: dataDir2, maxProcesses: 256, runscPath: wrapper, execAgent: false });
    const id = testSandboxId();
    const creating = first.create(options(id)).catch((error: unknown) => error);
    try {
      while (!(await readFile(holdPid, 'utf8').catch(() => ''))) await new Promise((r) => setTimeout(r, 50));
      await first.settle(id); // its own create is under way: left alone
      expect((await first.observe(id)).status).toBe('running');
      await new Promise((r) => setTimeout(r, 20));
      const restarted = new GvisorDriver({ dataDir: dataDir2, maxProcesses: 256, execAgent: false });
      await restarted.settle(id);
      expect((await restarted.observe(id)).status).toBe('stopped');
      await restarted.create(options(id));
      expect(await runInSandbox(restarted, id, ['true'])).toMatchObject({ exitCode: 0 });
      await restarted.delete(id);
      await restarted.close();
    } finally {
      const pid = Number(await readFile(holdPid, 'utf8').catch(() => '0'));
      if (pid > 0) process.kill(pid, 'SIGKILL');
      await creating;
      await first.delete(id).catch(() => undefined);
      await first.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('stop ends processes and keeps the disk; create boots fresh on it', async () => {
    const id = await create();
    await startCounter(id);
    await sh(id, 'echo survives > /root/disk.txt');
    await driver.stop(id);
    expect((await driver.observe(id)).status).toBe('stopped');
    expect(await leftovers(id)).toEqual([]);
    await driver.create(options(id));
    expect(await sh(id, 'cat /root/disk.txt')).toBe('survives');
    expect(await sh(id, 'ps -eo args | grep -c "[c]ounter.py" || true')).toBe('0');
  });

  it('fork x5 of a running sandbox: children continue and diverge, the parent is unaffected', async () => {
    const parent = await create();
    const [atFork, parentPid] = await startCounter(parent);
    await sh(parent, 'echo parent > /root/who');
    const children = Array.from({ length: 5 }, () => {
      const sandboxId = testSandboxId();
      created.add(sandboxId);
      return { sandboxId, hostname: `child-${sandboxId.slice(4, 12)}` };
    });
    await driver.fork(parent, { template, resources: RESOURCES, children });
    const randoms = new Set<string>();
    for (const child of children) {
      expect((await driver.observe(child.sandboxId)).status).toBe('running');
      const [n, pid] = await ask(child.sandboxId);
      expect(n).toBe(atFork + 1);
      expect(pid).toBe(parentPid);
      expect(await sh(child.sandboxId, 'cat /root/who')).toBe('parent');
      await sh(child.sandboxId, `echo ${child.sandboxId} > /root/who`);
      expect(await sh(child.sandboxId, 'hostname; cat /etc/hostname')).toBe(`${child.hostname}\n${child.hostname}`);
      // Its own name resolves (the disk copy's /etc/hosts named the parent).
      expect(await sh(child.sandboxId, `getent hosts ${child.hostname}`)).toMatch(/^127\.0\.1\.1\s/);
      randoms.add(await sh(child.sandboxId, 'head -c16 /dev/urandom | od -An -tx1'));
    }
    expect(randoms.size).toBe(5);
    for (const child of children) expect(await sh(child.sandboxId, 'cat /root/who')).toBe(child.sandboxId);
    expect(await sh(parent, 'cat /root/who')).toBe('parent');
    expect((await ask(parent))[0]).toBe(atFork + 1);
    expect(await sh(parent, 'hostname')).toBe(options(parent).hostname);
    expect(await readdir(join(dataDir, 'sandboxes', parent))).not.toContain(expect.stringMatching(/^fork-/));

    // A single child takes the fork point's disk copy (moved, not copied again): the parent's own disk is untouched.
    const single = { sandboxId: testSandboxId(), hostname: 'child-single' };
    created.add(single.sandboxId);
    await driver.fork(parent, { template, resources: RESOURCES, children: [single] });
    expect(await sh(single.sandboxId, 'cat /root/who; hostname')).toBe(`parent\n${single.hostname}`);
    await sh(single.sandboxId, 'echo single > /root/who && sync');
    expect(await sh(parent, 'cat /root/who; hostname')).toBe(`parent\n${options(parent).hostname}`);
    expect((await ask(single.sandboxId))[0]).toBe(atFork + 2);
    expect((await ask(parent))[0]).toBe(atFork + 2);
    expect(await readdir(join(dataDir, 'sandboxes', parent))).not.toContain(expect.stringMatching(/^fork-/));
  });

  it('a container gets its own CPU limit once it runs: created, resumed, and as a fork child', async () => {
    // runsc boots and restores a container on every host CPU (restores under a 1-CPU quota are ~35 % slower);
    // the driver sets the sandbox's limit right after. Checked in the cgroup itself after each way of starting.
    const quotaFile = async (id: string) => {
      const cpu = (await findSandboxCgroups('/sys/fs/cgroup', id)).find((d) => d.includes('/cpu/'));
      if (cpu === undefined) throw new Error(`no cpu cgroup for ${id}`);
      return join(cpu, 'cpu.cfs_quota_us');
    };
    const quotaUs = async (id: string) => Number((await readFile(await quotaFile(id), 'utf8')).trim());
    const expected = Math.round(RESOURCES.cpuCount * 100_000);
    const parent = await create();
    expect(await quotaUs(parent)).toBe(expected);
    await driver.pause(parent);
    await driver.resume(options(parent));
    expect(await quotaUs(parent)).toBe(expected);
    const child = testSandboxId();
    created.add(child);
    await driver.fork(parent, {
      template,
      resources: RESOURCES,
      children: [{ sandboxId: child, hostname: 'cpu-child' }],
    });
    expect(await quotaUs(child)).toBe(expected);
    expect(await quotaUs(parent)).toBe(expected);
    // A crash between runsc's restore and the driver's step left the boot quota: the restart's settle sets it again.
    await writeFile(await quotaFile(child), '-1');
    await driver.settle(child);
    expect(await quotaUs(child)).toBe(expected);
    // So does a create run again on a container that runs already (the step after a crash mid-start).
    await writeFile(await quotaFile(parent), '-1');
    await driver.create(options(parent));
    expect(await quotaUs(parent)).toBe(expected);
  });

  it('fork of a paused sandbox leaves it paused; the children run', async () => {
    const parent = await create();
    const [atPause] = await startCounter(parent);
    await driver.pause(parent);
    const children = [testSandboxId(), testSandboxId()].map((sandboxId) => {
      created.add(sandboxId);
      return { sandboxId, hostname: `k-${sandboxId.slice(4, 10)}` };
    });
    await driver.fork(parent, { template, resources: RESOURCES, children });
    for (const child of children) expect((await ask(child.sandboxId))[0]).toBe(atPause + 1);
    expect((await driver.observe(parent)).status).toBe('paused');
    await driver.resume(options(parent));
    expect((await ask(parent))[0]).toBe(atPause + 1);
  });

  it('a fork whose restores fail leaves no child behind (disk copies made ahead included); the parent runs on', async () => {
    // Every `runsc restore` fails: the first children fail while the disk copies of later ones are made ahead.
    const failDir = await mkdtemp(join(tmpdir(), 'burrow-failing-fork-'));
    const wrapper = await runscWrapper(failDir, 'restore', `echo 'injected restore failure' >&2; exit 128`);
    const failing = new GvisorDriver({ dataDir: join(failDir, 'data'), maxProcesses: 256, runscPath: wrapper });
    const failingRunsc = new RunscCli('runsc', join(failDir, 'data', 'runsc'), 'systrap');
    const parent = testSandboxId();
    const children = [testSandboxId(), testSandboxId(), testSandboxId(), testSandboxId()].map((sandboxId) => ({
      sandboxId,
      hostname: `f-${sandboxId.slice(4, 10)}`,
    }));
    try {
      await failing.create(options(parent));
      await expect(failing.fork(parent, { template, resources: RESOURCES, children })).rejects.toThrow(
        /restore failed/,
      );
      const containers = await failingRunsc.list();
      for (const { sandboxId } of children) {
        const dir = join(failDir, 'data', 'sandboxes', sandboxId);
        expect(containers).not.toContain(sandboxId);
        expect([...(await mountsUnder(dir)), ...(await loopDevicesUnder(dir))]).toEqual([]);
        expect(await findSandboxCgroups('/sys/fs/cgroup', sandboxId)).toEqual([]);
        await expect(readdir(dir)).rejects.toThrow(/ENOENT/);
      }
      expect((await failing.observe(parent)).status).toBe('running');
      expect((await runInSandbox(failing, parent, ['echo', 'still here'])).stdout.toString()).toBe('still here\n');
    } finally {
      await failing.delete(parent).catch(() => undefined);
      for (const { sandboxId } of children) await failing.delete(sandboxId).catch(() => undefined);
      await failing.close();
      await rm(failDir, { recursive: true, force: true });
    }
  });

  it('a snapshot outlives its sandbox and seeds new ones with memory or filesystem only', async () => {
    const source = await create();
    const [atSnap] = await startCounter(source);
    await sh(source, 'echo snap > /root/snap.txt');
    const snapDir = join(dataDir, 'snap-1');
    const info = await driver.snapshot(source, { targetDir: snapDir, memory: true });
    expect(info.imageSizeBytes).toBeGreaterThan(0);
    await sh(source, 'echo after > /root/snap.txt');
    await driver.delete(source);
    created.delete(source);
    const withMemory = testSandboxId();
    created.add(withMemory);
    await driver.createFromSnapshot({ ...options(withMemory), sourceDir: snapDir, memory: true });
    expect((await ask(withMemory))[0]).toBe(atSnap + 1);
    expect(await sh(withMemory, 'cat /root/snap.txt')).toBe('snap');
    const fsOnly = testSandboxId();
    created.add(fsOnly);
    await driver.createFromSnapshot({ ...options(fsOnly), sourceDir: snapDir, memory: false });
    expect(await sh(fsOnly, 'cat /root/snap.txt')).toBe('snap');
    expect(await sh(fsOnly, 'ps -eo args | grep -c "[c]ounter.py" || true')).toBe('0');
    await writeFile(join(snapDir, 'image/pages.img'), 'x', { flag: 'a' });
    await expect(
      driver.createFromSnapshot({ ...options(testSandboxId()), sourceDir: snapDir, memory: true }),
    ).rejects.toThrow(CheckpointRejectedError);
    await rm(snapDir, { recursive: true, force: true });
  });

  it('deleting everything returns the data dir to its starting size and leaves nothing on the host', async () => {
    const du = () => Number(execFileSync('du', ['-sk', dataDir]).toString().split('\t')[0]);
    const start = du();
    const id = await create();
    await startCounter(id);
    await sh(id, 'head -c 5000000 /dev/urandom > /root/blob');
    await driver.pause(id);
    const snapDir = join(dataDir, 'snap-del');
    await driver.snapshot(id, { targetDir: snapDir, memory: true });
    const child = testSandboxId();
    created.add(child);
    await driver.fork(id, { template, resources: RESOURCES, children: [{ sandboxId: child, hostname: 'c' }] });
    expect(du()).toBeGreaterThan(start + 5000);
    await driver.delete(id);
    await driver.delete(child);
    await rm(snapDir, { recursive: true, force: true });
    created.clear();
    expect(await leftovers(id)).toEqual([]);
    expect(await leftovers(child)).toEqual([]);
    expect(du()).toBeLessThanOrEqual(start + 8);
  });
});
