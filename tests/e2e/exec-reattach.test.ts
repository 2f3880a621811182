/**
 * End to end: a streamed (foreground) command outlives a pause, a fork and a memory snapshot of its sandbox, through
 * the SDK against a REAL server (real runsc sandbox, real SQLite). The stream gets a `paused` frame, the SDK waits
 * until the sandbox runs again and attaches to the command from the offset it reached: every line arrives once, in
 * order, then the real exit code.
 */
import { Sandbox } from '@burrow/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './burrow-test-server.js';

const RUN_ID = `reat-${Date.now().toString(36)}`;
let server: TestServer;
let sandbox: Sandbox;
const connection = () => ({ apiUrl: server.apiUrl, apiKey: server.adminKey });

/** Prints 1..count, one line every `sleepS` seconds. */
const LOOP = (count: number, sleepS: number) => `for i in $(seq 1 ${count}); do echo $i; sleep ${sleepS}; done`;
const lines = (count: number) => Array.from({ length: count }, (_, i) => String(i + 1));

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

/**
 * Streams `cmd` and calls `at` once the stdout holds the line `trigger` (without waiting for it); returns stdout,
 * stderr and the exit event.
 */
async function streamWith(box: Sandbox, cmd: string, trigger: string, at: () => Promise<void>) {
  const stream = box.commands.stream(cmd);
  let stdout = '';
  let stderr = '';
  let fired: Promise<void> | undefined;
  let exit: { exitCode: number | null; signal: string | null } | undefined;
  for await (const event of stream) {
    if (event.type === 'stdout') {
      stdout += Buffer.from(event.data).toString('utf8');
      if (fired === undefined && stdout.split('\n').includes(trigger)) fired = at();
    } else if (event.type === 'stderr') {
      stderr += Buffer.from(event.data).toString('utf8');
    } else {
      exit = event;
    }
  }
  await fired;
  return { stdout, stderr, exit };
}

describe('a streamed command outlives a checkpoint of its sandbox', () => {
  it('pause at i≈10, resume 3 s later: the SDK delivers 1..50 once, in order, and exit code 0', async () => {
    let pausedFor = 0;
    const result = await streamWith(sandbox, LOOP(50, 0.1), '10', async () => {
      await sandbox.pause();
      const pausedAt = Date.now();
      await new Promise((resolve) => setTimeout(resolve, 3_000));
      pausedFor = Date.now() - pausedAt;
      await sandbox.resume();
    });
    expect(pausedFor).toBeGreaterThanOrEqual(3_000);
    expect(result.stderr).toBe('');
    expect(result.stdout.trimEnd().split('\n')).toEqual(lines(50));
    expect(result.exit).toMatchObject({ exitCode: 0, signal: null });
    // It went on as a command of its own, listed with its pid.
    const listed = (await sandbox.commands.list()).filter((c) => c.argv.join(' ').includes('seq 1 50'));
    expect(listed).toHaveLength(1);
    expect(listed[0]).toMatchObject({ status: 'exited', exitCode: 0 });
  }, 120_000);

  it('fork at i≈10: the parent stream goes on to 50; the child runs the same command (same pid) to its end', async () => {
    let children: Sandbox[] = [];
    const result = await streamWith(sandbox, LOOP(30, 0.1), '10', async () => {
      children = await sandbox.fork();
    });
    expect(result.stdout.trimEnd().split('\n')).toEqual(lines(30));
    expect(result.exit).toMatchObject({ exitCode: 0 });
    const child = children[0];
    if (child === undefined) throw new Error('no fork child');
    const parentCommand = (await sandbox.commands.list()).find((c) => c.argv.join(' ').includes('seq 1 30'));
    const childCommand = (await child.commands.list()).find((c) => c.argv.join(' ').includes('seq 1 30'));
    expect(childCommand?.commandId).toBe(parentCommand?.commandId);
    expect(childCommand?.pid).toBe(parentCommand?.pid);
    const handle = await child.commands.connect(childCommand?.commandId ?? '', { offset: childCommand?.firstOffset });
    let childOut = '';
    for await (const event of handle) {
      if (event.type === 'stdout') childOut += Buffer.from(event.data).toString('utf8');
      if (event.type === 'exit') expect(event.exitCode).toBe(0);
    }
    expect(childOut.trimEnd().split('\n').at(-1)).toBe('30');
    await child.delete();
  }, 120_000);
});
