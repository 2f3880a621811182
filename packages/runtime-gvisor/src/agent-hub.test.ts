import { mkdtemp, rm } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AgentHub } from './agent-hub.js';

/** One frame: `[type u8][length u32 BE][payload]`. */
function frame(type: string, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(5);
  head.write(type, 0, 'latin1');
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

/** A FAKE agent connection (a plain Unix socket client in this process): sends frames, collects the host's. */
class FakeAgentConnection {
  readonly frames: Array<{ type: string; payload: Buffer }> = [];
  private pending = Buffer.alloc(0);
  private waiters: Array<() => void> = [];
  private constructor(readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.pending = Buffer.concat([this.pending, chunk]);
      while (this.pending.length >= 5 && this.pending.length >= 5 + this.pending.readUInt32BE(1)) {
        const length = this.pending.readUInt32BE(1);
        this.frames.push({
          type: String.fromCharCode(this.pending[0] ?? 0),
          payload: this.pending.subarray(5, 5 + length),
        });
        this.pending = this.pending.subarray(5 + length);
      }
      for (const waiter of this.waiters.splice(0)) waiter();
    });
  }

  static async open(path: string, first: Buffer): Promise<FakeAgentConnection> {
    const socket = connect(path);
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    socket.write(first);
    return new FakeAgentConnection(socket);
  }

  /** Waits (at most 5 s) until `count` frames came from the host. */
  async received(count: number): Promise<Array<{ type: string; payload: Buffer }>> {
    const deadline = Date.now() + 5_000;
    while (this.frames.length < count) {
      if (Date.now() > deadline) throw new Error(`got ${this.frames.length} frames, waited for ${count}`);
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 50);
      });
    }
    return this.frames;
  }
}

/** Polls `check` every 10 ms for at most 5 s. */
async function until(check: () => boolean): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not met within 5 s');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const u32 = (value: number): Buffer => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(value);
  return b;
};

// Host side of the agent protocol against a fake agent (no sandbox): the spare data connection.
describe('AgentHub spare data connections (fake agent)', () => {
  let dir: string;
  let hub: AgentHub;
  const id = 'sbx_fakeagent';
  const opened: FakeAgentConnection[] = [];

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'burrow-hub-test-'));
    hub = new AgentHub();
    expect(await hub.listen(id, dir)).toBe(true);
  });

  afterEach(async () => {
    for (const connection of opened.splice(0)) connection.socket.destroy();
    await hub.closeAll();
    await rm(dir, { recursive: true, force: true });
  });

  const open = async (first: Buffer): Promise<FakeAgentConnection> => {
    const connection = await FakeAgentConnection.open(join(dir, 'agent.sock'), first);
    opened.push(connection);
    return connection;
  };

  it('sends an exec on a spare (no connect back, no H frame) and frames right behind it go there too', async () => {
    const ctl = await open(frame('A', Buffer.from('burrow-agent 1')));
    const control = await hub.control(id, 5_000);
    expect(control).not.toBeNull();
    const spare = await open(frame('W'));
    await until(() => hub.spareCount(id) === 1);

    const aborted = new AbortController();
    aborted.abort();
    const started = hub.exec(id, control as Socket, {
      argv: ['sh', '-c', 'echo hi'],
      env: { A: 'b' },
      cwd: '/tmp',
      signal: aborted.signal,
    });
    const [exec] = await spare.received(1);
    expect(exec?.type).toBe('E');
    const fields = exec?.payload.toString('latin1').split('\0') ?? [];
    expect(fields.slice(1)).toEqual(['/tmp', '', '', '3', 'sh', '-c', 'echo hi', 'A=b', '']);
    spare.socket.write(Buffer.concat([frame('P', u32(42)), frame('O', Buffer.from('hi\n')), frame('X', u32(0))]));
    const process = await started;
    const out: Buffer[] = [];
    process.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    expect(await process.exited).toEqual({ exitCode: 0, signal: null });
    expect(Buffer.concat(out).toString()).toBe('hi\n');
    // The caller's abort (already signalled) went to the same connection as a SIGKILL.
    const frames = await spare.received(2);
    expect(frames[1]).toMatchObject({ type: 'S' });
    expect(frames[1]?.payload[0]).toBe(9);
    expect(ctl.frames).toEqual([]);
    expect(hub.spareCount(id)).toBe(0);
  });

  it('skips a spare the agent closed: the exec goes over the control connection and a connection back', async () => {
    const ctl = await open(frame('A', Buffer.from('burrow-agent 1')));
    const control = (await hub.control(id, 5_000)) as Socket;
    const spare = await open(frame('W'));
    await until(() => hub.spareCount(id) === 1);
    spare.socket.destroy();
    await until(() => hub.spareCount(id) === 0);

    const started = hub.exec(id, control, { argv: ['true'], env: {}, cwd: '/' });
    const [exec] = await ctl.received(1);
    expect(exec?.type).toBe('E');
    const execId = exec?.payload.toString('latin1').split('\0')[0] ?? '';
    await open(Buffer.concat([frame('H', Buffer.from(execId)), frame('P', u32(7)), frame('X', u32(3 << 8))]));
    const process = await started;
    process.stdin.end();
    expect(await process.exited).toEqual({ exitCode: 3, signal: null });
  });

  it('starts a background command with a B frame and answers its pid from b; an agent of protocol 1 gets none', async () => {
    const old = await open(frame('A', Buffer.from('burrow-agent 1')));
    const options = {
      dir: '/.burrow/commands/cmd_x',
      argv: ['sleep', '9'],
      env: { A: 'b' },
      cwd: '/root',
      timeoutMs: 5_000,
      segmentBytes: 4096,
      maxSegments: 3,
    };
    expect(await hub.startBackground(id, (await hub.control(id, 5_000)) as Socket, options)).toBeNull();
    old.socket.destroy();
    for (let i = 0; i < 500 && (await hub.control(id, 0)) !== null; i++) await new Promise((r) => setTimeout(r, 10));
    const ctl = await open(frame('A', Buffer.from('burrow-agent 2')));
    const control = (await hub.control(id, 5_000)) as Socket;
    const started = hub.startBackground(id, control, options);
    const [start] = await ctl.received(1);
    expect(start?.type).toBe('B');
    const fields = start?.payload.toString('latin1').split('\0') ?? [];
    expect(fields.slice(1)).toEqual([
      '/.burrow/commands/cmd_x',
      '/root',
      '',
      '',
      '5000',
      '',
      '',
      '4096',
      '3',
      '2',
      'sleep',
      '9',
      'A=b',
      '',
    ]);
    ctl.socket.write(frame('b', Buffer.from(`${fields[0]}\0P 42 41 1700000000000`)));
    expect(await started).toEqual({ pid: 42, supervisorPid: 41, startedAtMs: 1700000000000 });
    const refused = hub.startBackground(id, control, options);
    const [, second] = await ctl.received(2);
    ctl.socket.write(frame('b', Buffer.from(`${second?.payload.toString('latin1').split('\0')[0]}\0F 4 11`)));
    await expect(refused).rejects.toThrow(/did not start \(F 4 11\)/);
  });
});
