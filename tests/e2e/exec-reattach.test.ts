/**
 * End to end: a streamed (foreground) command outlives a pause, a fork and a memory snapshot of its sandbox, through
 * the SDK against a REAL server (real runsc sandbox, real SQLite). The stream gets a `paused` frame, the SDK waits
 * until the sandbox runs again and attaches to the command from the offset it reached: every line arrives once, in
 * order, then the real exit code.
 */
import { Sandbox } from '@burrow/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './burrow-test-server.js';
import { runCli } from './cli-runner.js';

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

/** The loop, also writing its counter to /root/progress-<tag> (for callers that do not stream). */
const PROGRESS_LOOP = (count: number, tag: string) =>
  `for i in $(seq 1 ${count}); do echo $i; echo $i > /root/progress-${tag}; sleep 0.1; done`;

/** Resolves once /root/progress-<tag> holds a number ≥ `at`. */
async function progressReached(box: Sandbox, tag: string, at: number): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    const text = await box.files
      .read(`/root/progress-${tag}`)
      .then((bytes) => Buffer.from(bytes).toString('utf8'))
      .catch(() => '0');
    if (Number(text.trim()) >= at) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`progress ${tag} did not reach ${at}`);
}

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

  it('a buffered run (POST /exec) paused at i≈10 answers once the command ended, with all of its output', async () => {
    const run = sandbox.commands.run(PROGRESS_LOOP(30, 'run'));
    await progressReached(sandbox, 'run', 10);
    await sandbox.pause();
    await sandbox.resume();
    const result = await run;
    expect(result.exitCode).toBe(0);
    expect(result.stdout.trimEnd().split('\n')).toEqual(lines(30));
  }, 120_000);

  it('burrow exec across a memory snapshot: the CLI prints 1..30 once and exits 0; the restored copy runs it on', async () => {
    const cli = runCli(['exec', sandbox.id, '--', 'sh', '-c', PROGRESS_LOOP(30, 'cli')], {
      env: { BURROW_URL: server.apiUrl, BURROW_API_KEY: server.adminKey },
      timeoutMs: 110_000,
    });
    await progressReached(sandbox, 'cli', 10);
    const snapshot = await sandbox.snapshots.create({ name: `reattach-${RUN_ID}` });
    const result = await cli;
    expect(result.stderr).toBe('');
    expect(result.stdout.trimEnd().split('\n')).toEqual(lines(30));
    expect(result.code).toBe(0);
    const copy = await Sandbox.create({ ...connection(), fromSnapshot: snapshot.name ?? '', labels: { e2e: RUN_ID } });
    const command = (await copy.commands.list()).find((c) => c.argv.join(' ').includes('progress-cli'));
    expect(command).toBeDefined();
    const info = await (await copy.commands.connect(command?.commandId ?? '')).wait({ timeoutMs: 60_000 });
    expect(info).toMatchObject({ status: 'exited', exitCode: 0 });
    await copy.delete();
  }, 120_000);

  it('a PTY session attached across a pause: bash keeps its variables and history, one continuous output', async () => {
    const term = await sandbox.pty.create({ cols: 100, rows: 30, cmd: ['/bin/bash', '-i'] });
    const stream = term.output();
    let output = '';
    // next() by hand: leaving a for-await loop would close the stream.
    const until = async (text: string): Promise<void> => {
      const deadline = Date.now() + 60_000;
      while (!output.includes(text) && Date.now() < deadline) {
        const next = await iterator.next();
        if (next.done === true) return;
        const event = next.value;
        if (event.type === 'stdout' || event.type === 'stderr') output += Buffer.from(event.data).toString('utf8');
      }
    };
    const iterator = stream[Symbol.asyncIterator]();
    stream.writeStdin('KEPT=forty$((1+1)); echo ready-$KEPT\n');
    await until('ready-forty2');
    await sandbox.pause();
    await sandbox.resume();
    stream.writeStdin('echo after-$KEPT; history | grep -c ready-\n');
    await until('after-forty2');
    expect(output).toContain('after-forty2');
    stream.writeStdin('exit 7\n');
    let exit: number | null | undefined;
    for (let next = await iterator.next(); next.done !== true; next = await iterator.next()) {
      if (next.value.type === 'exit') exit = next.value.exitCode;
    }
    expect(exit).toBe(7);
  }, 120_000);

  it('output written with no client attached is replayed exactly (10 MiB); past the ring the client is told what it dropped', async () => {
    // Waits for /root/go, then writes n bytes of a 16-byte pattern (the ring keeps 16–20 MiB).
    const command = (n: number) =>
      `echo start; while [ ! -e /root/go ]; do sleep 0.05; done; yes 0123456789abcde | head -c ${n}`;
    const expected = (n: number) => `start\n${'0123456789abcde\n'.repeat(n / 16)}`;
    const TEN_MIB = 10 * 1024 * 1024;
    const PAST_RING = 24 * 1024 * 1024;
    let children: Sandbox[] = [];
    const stream = sandbox.commands.stream(command(TEN_MIB));
    const parent: Buffer[] = [];
    for await (const event of stream) {
      if (event.type === 'stdout') {
        parent.push(Buffer.from(event.data));
        if (children.length === 0 && Buffer.concat(parent).includes('start\n')) {
          children = await sandbox.fork();
          await sandbox.files.write('/root/go', '');
        }
      }
    }
    expect(Buffer.concat(parent).toString('utf8') === expected(TEN_MIB)).toBe(true);
    // In the fork child nobody was attached while the command wrote its output.
    const child = children[0];
    if (child === undefined) throw new Error('no fork child');
    const detached = (await child.commands.list()).find((c) => c.argv.join(' ').includes(`head -c ${TEN_MIB}`));
    await child.files.write('/root/go', '');
    const handle = await child.commands.connect(detached?.commandId ?? '', { offset: detached?.firstOffset });
    const info = await handle.wait({ timeoutMs: 60_000 });
    expect(info.exitCode).toBe(0);
    const replay = handle.output();
    const replayed: Buffer[] = [];
    for await (const event of replay) if (event.type === 'stdout') replayed.push(Buffer.from(event.data));
    expect(replay.droppedBytes).toBe(0);
    const whole = Buffer.from(expected(TEN_MIB));
    expect(Buffer.concat(replayed).equals(whole.subarray(detached?.firstOffset ?? 0))).toBe(true);
    await child.delete();

    // Past the ring: the oldest output is dropped and an attach from 0 says how many bytes.
    await sandbox.commands.run(['rm', '-f', '/root/go'], { check: true });
    const big = sandbox.commands.stream(command(PAST_RING));
    await big.started();
    // A memory snapshot detaches it from the stream; closing the stream then leaves it running detached.
    await sandbox.snapshots.create({ memory: true });
    big.close();
    const listed = (await sandbox.commands.list()).find((c) => c.argv.join(' ').includes(`head -c ${PAST_RING}`));
    const bigCommandId = listed?.commandId ?? '';
    await sandbox.files.write('/root/go', '');
    const bigHandle = await sandbox.commands.connect(bigCommandId);
    expect((await bigHandle.wait({ timeoutMs: 60_000 })).exitCode).toBe(0);
    const fromZero = bigHandle.output({ offset: 0, follow: false });
    let bytes = 0;
    for await (const event of fromZero) if (event.type === 'stdout') bytes += event.data.byteLength;
    const total = Buffer.byteLength(expected(PAST_RING));
    expect(fromZero.droppedBytes).toBeGreaterThan(0);
    expect(fromZero.droppedBytes + bytes).toBe(total);
  }, 180_000);
});
