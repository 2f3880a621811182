/**
 * End to end: background commands under the exec agent's C supervisor (`burrow-agent --supervise`), through the SDK
 * against a REAL server (real runsc sandbox, real SQLite): no python3 on the start path, the whole process tree
 * ends on a kill or a timeout, the command runs on through a pause and a fork, many start at once.
 */
import { type CommandHandle, Sandbox } from '@burrow/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './burrow-test-server.js';

const RUN_ID = `sup-${Date.now().toString(36)}`;
let server: TestServer;
let sandbox: Sandbox;
const connection = () => ({ apiUrl: server.apiUrl, apiKey: server.adminKey });

beforeAll(async () => {
  server = await startTestServer();
  sandbox = await Sandbox.create({ ...connection(), labels: { e2e: RUN_ID } });
});

afterAll(async () => {
  try {
    if (server !== undefined) {
      for await (const left of Sandbox.listAll({ ...connection(), labels: { e2e: RUN_ID } })) {
        await left.delete().catch(() => {});
      }
    }
  } finally {
    await server?.close();
  }
});

/** Processes of the sandbox whose command line holds `marker`, as `pid args` lines. */
async function processesWith(box: Sandbox, marker: string): Promise<string[]> {
  const ps = await box.commands.run(['ps', '-eo', 'pid=,stat=,args=']);
  return ps.stdout.split('\n').filter((line) => line.includes(marker) && !/\sZ/.test(line) && !line.includes('ps -eo'));
}

/** Poll until `check` holds, at most `timeoutMs`. */
async function eventually(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not reached in time');
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** A command whose children ignore SIGTERM, one of them in a session of its own (a daemon). */
const STUBBORN_TREE = (marker: string) =>
  `trap '' TERM; (setsid sh -c "trap '' TERM; sleep 1001 # ${marker}" &); sh -c "trap '' TERM; sleep 1002 # ${marker}" & sleep 1003 # ${marker}`;

describe('background commands under the agent supervisor', () => {
  it('start through the agent: no python supervisor, the supervisor is burrow-agent --supervise', async () => {
    const handle = await sandbox.commands.run('echo started; sleep 30', { background: true });
    try {
      const probe = await sandbox.commands.run([
        'sh',
        '-c',
        `test -e /.burrow/bin/supervisor.py && echo python; tr '\\0' ' ' < /proc/$(cat /proc/${handle.pid}/stat | cut -d' ' -f4)/cmdline`,
      ]);
      expect(probe.stdout).not.toContain('python');
      expect(probe.stdout).toContain(`/.burrow-agent/burrow-agent --supervise ${handle.commandId}`);
    } finally {
      await handle.kill();
    }
  });

  it('kill ends every descendant, children that ignore SIGTERM and a daemon in its own session included', async () => {
    const marker = `kill-${RUN_ID}`;
    const handle = await sandbox.commands.run(['sh', '-c', STUBBORN_TREE(marker)], { background: true });
    await eventually(async () => (await processesWith(sandbox, marker)).length >= 3);
    await handle.kill('SIGKILL');
    const info = await handle.wait({ timeoutMs: 10_000 });
    expect(info).toMatchObject({ status: 'exited', exitCode: null, signal: 'SIGKILL' });
    await eventually(async () => (await processesWith(sandbox, marker)).length === 0, 5_000).catch(async () => {
      expect(await processesWith(sandbox, marker)).toEqual([]);
    });
  });

  it('a timeout ends the whole tree the same way and says timedOut', async () => {
    const marker = `timeout-${RUN_ID}`;
    const handle = await sandbox.commands.run(['sh', '-c', STUBBORN_TREE(marker)], {
      background: true,
      timeoutMs: 1_500,
    });
    const info = await handle.wait({ timeoutMs: 15_000 });
    expect(info).toMatchObject({ status: 'exited', exitCode: null, signal: 'SIGKILL', timedOut: true });
    await eventually(async () => (await processesWith(sandbox, marker)).length === 0, 5_000).catch(async () => {
      expect(await processesWith(sandbox, marker)).toEqual([]);
    });
  });

  it('200 commands running at once all complete with their own exit codes', async () => {
    // Each command is two processes (its supervisor and the shell) against RLIMIT_NPROC, which is memoryMiB / 2:
    // 1024 MiB allows 512. Every command waits on a FIFO until all 200 run, then they all end at once. The server
    // allows 128 requests in flight per key: starts go out 100 at a time.
    const box = await Sandbox.create({ ...connection(), labels: { e2e: RUN_ID }, memoryMiB: 1024 });
    await box.commands.run(['sh', '-c', 'rm -f /root/gate && mkfifo /root/gate'], { check: true });
    const handles: CommandHandle[] = [];
    for (let wave = 0; wave < 2; wave++) {
      handles.push(
        ...(await Promise.all(
          Array.from({ length: 100 }, (_, k) => {
            const i = wave * 100 + k;
            return box.commands.run(`read line < /root/gate; echo n${i}; exit ${i % 256}`, {
              background: true,
            });
          }),
        )),
      );
    }
    const running = (await box.commands.list()).filter((c) => c.status === 'running');
    expect(running.length).toBe(200);
    // Opening the FIFO for writing releases every reader; closing it gives them their end of file.
    await box.commands.run(['sh', '-c', 'exec 3>/root/gate; sleep 1; exec 3>&-'], { check: true });
    const infos = [];
    for (const handle of handles) infos.push(await handle.wait({ timeoutMs: 120_000 }));
    expect(infos.map((info) => info.exitCode)).toEqual(handles.map((_, i) => i % 256));
    expect(new Set(handles.map((handle) => handle.pid)).size).toBe(200);
    await box.delete();
  }, 400_000);

  it('a running command keeps its pid and output through a pause and resume and through a fork', async () => {
    const handle = await sandbox.commands.run('for i in $(seq 1 40); do echo $i; sleep 0.1; done; exit 3', {
      background: true,
    });
    await eventually(async () => (await handle.info()).endOffset >= 6);
    await sandbox.pause();
    await sandbox.resume();
    const [child] = await sandbox.fork({ count: 1 });
    try {
      const info = await handle.wait({ timeoutMs: 30_000 });
      expect(info).toMatchObject({ status: 'exited', exitCode: 3 });
      const events = [];
      for await (const event of await sandbox.commands.connect(handle.commandId, { offset: 0 })) events.push(event);
      const text = Buffer.concat(
        events.filter((e) => e.type === 'stdout').map((e) => Buffer.from((e as { data: Uint8Array }).data)),
      ).toString();
      expect(text).toBe(`${Array.from({ length: 40 }, (_, i) => i + 1).join('\n')}\n`);
      const inChild = await child?.commands.list();
      expect(inChild?.find((c) => c.commandId === handle.commandId)?.pid).toBe(handle.pid);
      const childInfo = await child?.commands.connect(handle.commandId).then((h) => h.wait({ timeoutMs: 30_000 }));
      expect(childInfo).toMatchObject({ status: 'exited', exitCode: 3 });
    } finally {
      await child?.delete();
    }
  }, 120_000);
});

describe('timeouts across a pause', () => {
  it('time paused does not count against timeoutMs: the timeout is enforced inside the sandbox', async () => {
    const box = await Sandbox.create({ ...connection(), labels: { e2e: RUN_ID } });
    try {
      const handle = await box.commands.run('sleep 100', { background: true, timeoutMs: 6_000 });
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      await box.pause();
      // Paused longer than the whole timeout: a wall-clock limit would have expired.
      await new Promise((resolve) => setTimeout(resolve, 7_000));
      await box.resume();
      expect((await handle.info()).status).toBe('running');
      const info = await handle.wait({ timeoutMs: 30_000 });
      expect(info).toMatchObject({ status: 'exited', timedOut: true, signal: 'SIGKILL' });
    } finally {
      await box.delete();
    }
  }, 120_000);
});
