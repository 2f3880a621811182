/**
 * End to end: background commands, PTYs, per-command options and exact bytes, through the SDK against a REAL
 * server (real runsc sandbox, in-sandbox supervisor, real SQLite).
 */
import { createHash } from 'node:crypto';
import { type CommandHandle, CommandNotFoundError, CommandTimeoutError, Sandbox, UserNotFoundError } from '@burrow/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './burrow-test-server.js';
import { runCli } from './cli-runner.js';

const RUN_ID = `cmd-${Date.now().toString(36)}`;
let server: TestServer;
let sandbox: Sandbox;
const connection = () => ({ apiUrl: server.apiUrl, apiKey: server.adminKey });

beforeAll(async () => {
  server = await startTestServer();
  sandbox = await Sandbox.create({ ...connection(), labels: { e2e: RUN_ID } });
  console.info(`commands e2e: run ${RUN_ID}, sandbox ${sandbox.id}`);
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

function collect(events: Array<{ type: string; data?: Uint8Array }>, type: 'stdout' | 'stderr'): Buffer {
  return Buffer.concat(events.filter((e) => e.type === type).map((e) => Buffer.from(e.data ?? new Uint8Array())));
}

describe('background commands', () => {
  it('start returns {commandId, pid}; output bytes, exit code and the list are exact', async () => {
    const handle = await sandbox.commands.run("printf 'a\\000b\\377\\n'; echo err >&2; exit 7", { background: true });
    expect(handle.commandId).toMatch(/^cmd_/);
    expect(handle.pid).toBeGreaterThan(1);
    const events = [];
    for await (const event of handle) events.push(event);
    expect(collect(events, 'stdout')).toEqual(Buffer.from([0x61, 0, 0x62, 0xff, 0x0a]));
    expect(collect(events, 'stderr').toString()).toBe('err\n');
    const exit = events.at(-1);
    expect(exit).toMatchObject({ type: 'exit', exitCode: 7, signal: null, timedOut: false, offset: 9 });
    const info = await handle.wait();
    expect(info).toMatchObject({ status: 'exited', exitCode: 7, endOffset: 9, firstOffset: 0 });
    const listed = await sandbox.commands.list();
    expect(listed.map((c) => c.commandId)).toContain(handle.commandId);
  });

  it('background commands do not depend on files a process inside can remove (/dev/.burrow-spawn*)', async () => {
    const own = await Sandbox.create({ ...connection(), labels: { e2e: RUN_ID } });
    try {
      await own.commands.run('rm -f /dev/.burrow-spawn /dev/.burrow-spawn.ready', { check: true });
      const t0 = Date.now();
      const handle = await own.commands.run('echo started', { background: true });
      const info = await handle.wait({ timeoutMs: 10_000 });
      expect(Date.now() - t0).toBeLessThan(8_000);
      expect(info).toMatchObject({ status: 'exited', exitCode: 0 });
    } finally {
      await own.delete();
    }
  });

  it('reattaches from an offset and reads what was written so far without following', async () => {
    const handle = await sandbox.commands.run("printf 'hello world'; sleep 30", { background: true });
    try {
      let info = await handle.info();
      for (let i = 0; i < 100 && info.endOffset < 11; i++) {
        await new Promise((r) => setTimeout(r, 50));
        info = await handle.info();
      }
      const again = await sandbox.commands.connect(handle.commandId, { offset: 6 });
      const events = [];
      for await (const event of again.output({ follow: false })) events.push(event);
      expect(collect(events, 'stdout').toString()).toBe('world');
      expect(events.at(-1)).toEqual({ type: 'end', offset: 11 });
    } finally {
      await handle.kill();
    }
  });

  it('kill signals the whole process group, named', async () => {
    const handle = await sandbox.commands.run('sleep 300 & sleep 300; echo never', { background: true });
    await handle.kill('SIGTERM');
    const info = await handle.wait({ timeoutMs: 10_000 });
    expect(info).toMatchObject({ status: 'exited', exitCode: null, signal: 'SIGTERM' });
    const ps = await sandbox.commands.run(['ps', '-eo', 'pgid=,args=']);
    expect(ps.stdout.split('\n').filter((l) => l.trim().startsWith(`${handle.pid} `))).toEqual([]);
  });

  it('a timeout kills the group and says timedOut, never exit 0', async () => {
    const handle = await sandbox.commands.run('sleep 30', { background: true, timeoutMs: 300 });
    const info = await handle.wait({ timeoutMs: 10_000 });
    expect(info).toMatchObject({ status: 'exited', exitCode: null, signal: 'SIGKILL', timedOut: true });
  });

  it('stdin reaches the command, and closing it ends cat', async () => {
    const handle = await sandbox.commands.run(['cat'], { background: true });
    await handle.sendStdin(Buffer.from([0, 1, 2, 0xe2, 0x82]));
    await handle.sendStdin(Buffer.from([0xac, 0x0a]));
    await handle.closeStdin();
    const info = await handle.wait({ timeoutMs: 10_000 });
    expect(info.exitCode).toBe(0);
    const events = [];
    for await (const event of handle) events.push(event);
    expect(collect(events, 'stdout')).toEqual(Buffer.from([0, 1, 2, 0xe2, 0x82, 0xac, 0x0a]));
  });

  it('input reaching a command after its exit is dropped: the attach stream still ends with the exit', async () => {
    const handle = await sandbox.commands.run("echo 'out'; exit 6", { background: true, pty: { cols: 80, rows: 24 } });
    await handle.wait({ timeoutMs: 10_000 });
    for (let run = 0; run < 5; run++) {
      const stream = handle.output();
      // Sent as soon as the socket opens, while the server still reads the log: each one finds the command ended.
      for (let i = 0; i < 10; i++) stream.writeStdin(`typed-${i}\n`);
      stream.resize({ cols: 100, rows: 30 });
      stream.closeStdin();
      const events = [];
      for await (const event of stream) events.push(event);
      expect(collect(events, 'stdout').toString()).toBe('out\r\n');
      expect(events.at(-1)).toMatchObject({ type: 'exit', exitCode: 6 });
    }
  });

  it('runs as the given user, in the given cwd, with the given env', async () => {
    const handle = await sandbox.commands.run('id -un; pwd; echo "$FOO"', {
      background: true,
      user: 'nobody',
      cwd: '/tmp',
      env: { FOO: 'bar' },
    });
    await handle.wait({ timeoutMs: 10_000 });
    const events = [];
    for await (const event of handle) events.push(event);
    expect(collect(events, 'stdout').toString()).toBe('nobody\n/tmp\nbar\n');
  });

  it('unknown commands and users have their own error codes', async () => {
    await expect(sandbox.commands.connect('cmd_00000000000000000000')).rejects.toBeInstanceOf(CommandNotFoundError);
    await expect(sandbox.commands.run('true', { background: true, user: 'no-such-user' })).rejects.toBeInstanceOf(
      UserNotFoundError,
    );
  });
});

describe('PTY', () => {
  it('the program sees the size, the input and a resize; exits with its code', async () => {
    const term = await sandbox.pty.create({ cols: 100, rows: 30, cmd: ['/bin/bash', '--norc', '-i'] });
    await sandbox.pty.sendInput(term.commandId, 'stty size; echo "T=$TERM"; tty\n');
    const stream = term.output();
    let text = '';
    let resized = false;
    let exitCode: number | null | undefined;
    for await (const event of stream) {
      if (event.type === 'stdout') text += Buffer.from(event.data).toString();
      if (!resized && text.includes('30 100')) {
        resized = true;
        await sandbox.pty.resize(term.commandId, { cols: 132, rows: 40 });
        await new Promise((r) => setTimeout(r, 200));
        await sandbox.pty.sendInput(term.commandId, 'stty size; exit 3\n');
      }
      if (event.type === 'exit') exitCode = event.exitCode;
    }
    expect(text).toContain('30 100');
    expect(text).toContain('T=xterm-256color');
    expect(text).toContain('/dev/pts/');
    expect(text).toContain('40 132');
    expect(exitCode).toBe(3);
  });

  it('a resize sends SIGWINCH to the program itself and to the foreground job of a shell', async () => {
    // Counts SIGWINCH; on a line of input prints the count and the size it sees, then exits.
    await sandbox.files.write(
      '/root/winch.py',
      [
        'import shutil, signal, sys',
        'count = 0',
        'def on_winch(*_):',
        '    global count',
        '    count += 1',
        'signal.signal(signal.SIGWINCH, on_winch)',
        'print("ready-%d" % (6 * 7), flush=True)',
        'sys.stdin.readline()',
        'size = shutil.get_terminal_size()',
        'print("winch=%d size=%dx%d" % (count, size.columns, size.lines), flush=True)',
      ].join('\n'),
    );
    const resizeAndRead = async (term: CommandHandle, stdinLine: string): Promise<string> => {
      let text = '';
      let resized = false;
      for await (const event of term.output()) {
        if (event.type === 'stdout') text += Buffer.from(event.data).toString();
        if (!resized && text.includes('ready-42')) {
          resized = true;
          await sandbox.pty.resize(term.commandId, { cols: 90, rows: 20 });
          await new Promise((r) => setTimeout(r, 300));
          await sandbox.pty.resize(term.commandId, { cols: 91, rows: 21 });
          await new Promise((r) => setTimeout(r, 300));
          await sandbox.pty.sendInput(term.commandId, stdinLine);
        }
      }
      return text;
    };
    // The PTY's own program (the session leader).
    const direct = await sandbox.pty.create({ cols: 80, rows: 24, cmd: ['python3', '/root/winch.py'] });
    expect(await resizeAndRead(direct, '\n')).toContain('winch=2 size=91x21');
    // A job of an interactive shell: its own process group, put in the foreground by bash (job control).
    const shell = await sandbox.pty.create({ cols: 80, rows: 24, cmd: ['/bin/bash', '--norc', '-i'] });
    await sandbox.pty.sendInput(shell.commandId, 'python3 /root/winch.py; exit\n');
    expect(await resizeAndRead(shell, '\n')).toContain('winch=2 size=91x21');
  });
});

describe('exec ended by something else than the command', () => {
  it('a command killed at the memory limit reports SIGKILL with reason oom_killed (SDK run), exits 137 (CLI stream)', async () => {
    const small = await Sandbox.create({ ...connection(), memoryMiB: 256, labels: { e2e: RUN_ID } });
    try {
      const hog = [
        'python3',
        '-c',
        'b = bytearray(1 << 30)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint("survived")',
      ];
      const result = await small.commands.run(hog);
      expect(result).toMatchObject({ exitCode: null, signal: 'SIGKILL', reason: 'oom_killed', timedOut: false });
      // A plain failure in the same sandbox afterwards is still a plain exit 1.
      expect(await small.commands.run('exit 1')).toMatchObject({ exitCode: 1, signal: null, reason: null });
      const cli = await runCli(['exec', small.id, '--', ...hog], {
        env: { BURROW_URL: server.apiUrl, BURROW_API_KEY: server.adminKey },
      });
      // The CLI streams: the exit frame carries the reason too.
      expect(cli.code).toBe(137);
      expect(cli.stderr).toContain('memory limit');
    } finally {
      await small.delete();
    }
  });

  it('a streaming exec that read stdin and is running at a pause goes on after the resume (paused frame, reattach)', async () => {
    const stream = sandbox.commands.stream(['sh', '-c', 'read line; echo "got $line"; sleep 6; echo after'], {
      timeoutMs: 60_000,
    });
    await stream.started();
    stream.writeStdin('abc\n');
    const events: Array<{ type: string; data?: Uint8Array }> = [];
    let cycled: Promise<unknown> | undefined;
    for await (const event of stream) {
      events.push(event);
      // The SDK waits through the pause and attaches again once the sandbox runs.
      if (cycled === undefined && collect(events, 'stdout').toString().includes('got abc')) {
        cycled = sandbox.pause().then(() => sandbox.resume());
      }
    }
    await cycled;
    expect(collect(events, 'stdout').toString()).toBe('got abc\nafter\n');
    expect(events.at(-1)).toMatchObject({ type: 'exit', exitCode: 0 });
  });
});

describe('exec (per command options, bytes, exit codes)', () => {
  it('user, cwd and env apply to one command', async () => {
    const result = await sandbox.commands.run('id -un; pwd; echo "$FOO"', {
      user: 'nobody',
      cwd: '/tmp',
      env: { FOO: 'x' },
    });
    expect(result.stdout).toBe('nobody\n/tmp\nx\n');
  });

  it('a timeout is timedOut with exec_timeout, never exit 0', async () => {
    const error = await sandbox.commands.run('sleep 30', { timeoutMs: 300 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CommandTimeoutError);
    expect((error as CommandTimeoutError).code).toBe('exec_timeout');
    expect((error as CommandTimeoutError).result).toMatchObject({ timedOut: true, exitCode: null, signal: 'SIGKILL' });
  });

  it('exit codes 0-255 are exact and signals are named', async () => {
    for (const code of [0, 1, 2, 126, 127, 128, 137, 254, 255]) {
      expect((await sandbox.commands.run(`exit ${code}`)).exitCode).toBe(code);
    }
    const killed = await sandbox.commands.run('kill -TERM $$');
    expect(killed).toMatchObject({ exitCode: null, signal: 'SIGTERM' });
  });

  it('output written just before exit arrives, split multi-byte characters and NULs too', async () => {
    const events: Array<{ type: string; data?: Uint8Array }> = [];
    for await (const e of sandbox.commands.stream([
      'python3',
      '-c',
      [
        'import os,sys',
        'b="€".encode()',
        'os.write(1, b[:1]); os.write(1, b[1:] + b"\\0\\xff")',
        'os.write(1, b"x" * 100000)',
        'os._exit(5)',
      ].join('\n'),
    ]))
      events.push(e);
    const out = collect(events, 'stdout');
    expect(out.subarray(0, 5)).toEqual(Buffer.from([0xe2, 0x82, 0xac, 0, 0xff]));
    expect(out.length).toBe(100_005);
    expect(events.at(-1)).toMatchObject({ type: 'exit', exitCode: 5 });
  });

  it('a grandchild holding stdout open does not hang exec: output ends 500 ms after the exit', async () => {
    const t0 = Date.now();
    const result = await sandbox.commands.run('sleep 30 & echo started');
    expect(result.stdout).toBe('started\n');
    expect(result.exitCode).toBe(0);
    expect(Date.now() - t0).toBeLessThan(10_000);
    await sandbox.commands.run('pkill -f "sleep 30" || true');
  });

  it('streams 64 MiB without loss', async () => {
    const hash = createHash('sha256');
    let bytes = 0;
    for await (const e of sandbox.commands.stream('head -c 67108864 /dev/urandom | tee /tmp/big | cat', {
      timeoutMs: 120_000,
    })) {
      if (e.type === 'stdout') {
        hash.update(e.data);
        bytes += e.data.byteLength;
      }
    }
    expect(bytes).toBe(64 * 1024 * 1024);
    const remote = await sandbox.commands.run('sha256sum /tmp/big | cut -d" " -f1; rm /tmp/big', { check: true });
    expect(hash.digest('hex')).toBe(remote.stdout.trim());
  });

  it('closing a stream does not kill the command unless asked', async () => {
    await sandbox.commands.run('rm -f /tmp/kept /tmp/killed');
    const kept = sandbox.commands.stream('sleep 1; touch /tmp/kept');
    const killed = sandbox.commands.stream('sleep 1; touch /tmp/killed', { killOnDisconnect: true });
    await Promise.all([kept.started(), killed.started()]);
    kept.close();
    killed.close();
    await new Promise((r) => setTimeout(r, 2000));
    const ls = await sandbox.commands.run('ls /tmp/kept /tmp/killed 2>/dev/null');
    expect(ls.stdout).toBe('/tmp/kept\n');
  });
});
