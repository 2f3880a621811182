/**
 * Drives a real Burrow server (real runsc) with E2B's own SDK, the `e2b` npm package, unmodified: lifecycle,
 * commands, PTY, files, watch, pause/resume, snapshots and fork, plus the refusals E2B's clients must see.
 * Every E2B sandbox here is a Burrow sandbox, checked from Burrow's side too.
 */
import { Sandbox as BurrowSandbox } from '@burrow/sdk';
import type { Sandbox as E2bSandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { startTestServer, type TestServer } from '../e2e/burrow-test-server.js';

let server: TestServer;
let Sandbox: typeof E2bSandbox;
let CommandExitError: typeof import('e2b').CommandExitError;
const testId = `e2b-${Date.now()}`;

beforeAll(async () => {
  // The e2b-base template (user `user`, sudo, node) is built once per machine and cached with `base`.
  server = await startTestServer({ e2bBase: true });
  process.env.E2B_API_URL = server.e2b.apiUrl;
  process.env.E2B_SANDBOX_URL = server.e2b.envdUrl;
  process.env.E2B_API_KEY = server.adminKey;
  ({ Sandbox, CommandExitError } = await import('e2b'));
}, 900_000);

afterAll(async () => {
  await server?.close();
});

/** The sandbox as Burrow's own API shows it. */
const burrowView = async (id: string) =>
  (await BurrowSandbox.get(id, { apiUrl: server.apiUrl, apiKey: server.adminKey })).info;

const create = (extra: Record<string, unknown> = {}) =>
  Sandbox.create('base', { timeoutMs: 300_000, metadata: { testId }, ...extra });

describe('E2B SDK against Burrow', () => {
  let sbx: E2bSandbox;
  beforeAll(async () => {
    sbx = await create();
  });
  afterAll(async () => {
    await sbx?.kill().catch(() => undefined);
  });

  test('an E2B sandbox is a Burrow sandbox: metadata are labels, the template is e2b-base', async () => {
    const seen = await burrowView(sbx.sandboxId);
    expect(seen.labels).toEqual({ testId });
    expect(seen.template).toBe('e2b-base');
    const info = await sbx.getInfo();
    expect(info).toMatchObject({
      sandboxId: sbx.sandboxId,
      templateId: 'base',
      metadata: { testId },
      state: 'running',
    });
    const listed = await Sandbox.list({ query: { metadata: { testId } } }).nextItems();
    expect(listed.map((s) => s.sandboxId)).toContain(sbx.sandboxId);
    expect(await sbx.isRunning()).toBe(true);
  });

  test('commands run as user in /home/user, with output, env, cwd and exit codes', async () => {
    const result = await sbx.commands.run('whoami; pwd; echo $FOO; echo oops >&2', { envs: { FOO: 'bar' } });
    expect(result.stdout).toBe('user\n/home/user\nbar\n');
    expect(result.stderr).toBe('oops\n');
    expect(result.exitCode).toBe(0);
    expect((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout).toBe('/tmp\n');
    const failed = await sbx.commands.run('exit 3').catch((error: unknown) => error);
    expect(failed).toBeInstanceOf(CommandExitError);
    expect((failed as InstanceType<typeof CommandExitError>).exitCode).toBe(3);
  });

  test('background commands: list, stdin, reattach, kill', async () => {
    const handle = await sbx.commands.run('cat', { background: true, stdin: true });
    const listed = await sbx.commands.list();
    expect(listed.map((p) => p.pid)).toContain(handle.pid);
    await sbx.commands.sendStdin(handle.pid, 'piped\n');
    await sbx.commands.closeStdin(handle.pid);
    const done = await handle.wait();
    expect(done.stdout).toBe('piped\n');

    const sleeper = await sbx.commands.run('echo start; sleep 600', { background: true });
    const attached = await sbx.commands.connect(sleeper.pid);
    expect(await sbx.commands.kill(sleeper.pid)).toBe(true);
    const ended = await attached.wait().catch((error: unknown) => error);
    expect(ended).toBeInstanceOf(CommandExitError);
    expect(await sbx.commands.kill(999_999)).toBe(false);
  });

  test('PTY: input, resize seen by tput', async () => {
    let output = '';
    const pty = await sbx.pty.create({
      cols: 80,
      rows: 24,
      onData: (data) => (output += new TextDecoder().decode(data)),
    });
    await sbx.pty.resize(pty.pid, { cols: 123, rows: 40 });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('tput cols; exit\n'));
    await pty.wait().catch(() => undefined);
    expect(output).toContain('123');
  });

  test('files: write, read, list, stat, mkdir, rename, remove, relative paths', async () => {
    await sbx.files.write('notes/a.txt', 'hello');
    expect(await sbx.files.read('/home/user/notes/a.txt')).toBe('hello');
    // What a write creates, parents included, belongs to the user: commands running as it can change them.
    const owners = await sbx.commands.run('stat -c "%U %a" notes notes/a.txt && touch notes/by-user');
    expect(owners.stdout).toBe('user 755\nuser 644\n');
    await sbx.files.remove('notes/by-user');
    const info = await sbx.files.getInfo('notes/a.txt');
    expect(info).toMatchObject({
      name: 'a.txt',
      type: 'file',
      path: '/home/user/notes/a.txt',
      size: 5,
      owner: 'user',
      group: 'user',
      permissions: '-rw-r--r--',
    });
    expect(await sbx.files.makeDir('/home/user/notes/sub')).toBe(true);
    expect(await sbx.files.makeDir('/home/user/notes/sub')).toBe(false);
    expect((await sbx.files.list('/home/user/notes')).map((e) => e.name).sort()).toEqual(['a.txt', 'sub']);
    await sbx.files.rename('/home/user/notes/a.txt', '/home/user/notes/b.txt');
    expect(await sbx.files.exists('/home/user/notes/a.txt')).toBe(false);
    expect((await sbx.commands.run('cat /home/user/notes/b.txt')).stdout).toBe('hello');
    await sbx.files.remove('/home/user/notes');
    expect(await sbx.files.exists('/home/user/notes')).toBe(false);
    const missing = await sbx.files.read('/home/user/none.txt').catch((error: unknown) => error);
    expect((missing as Error).name).toBe('FileNotFoundError');
  });

  test('watch: events for files a command creates', async () => {
    await sbx.files.makeDir('/home/user/watched');
    const events: string[] = [];
    const watch = await sbx.files.watchDir('/home/user/watched', (event) => {
      events.push(`${event.type}:${event.name}`);
    });
    await sbx.commands.run('echo x > /home/user/watched/new.txt');
    await expect.poll(() => events, { timeout: 10_000 }).toContain('create:new.txt');
    await watch.stop();
  });

  test("network options are Burrow's egress policy: allowInternetAccess false denies 0.0.0.0/0", async () => {
    const closed = await create({ allowInternetAccess: false, network: { allowOut: ['203.0.113.7'] } });
    try {
      const seen = await burrowView(closed.sandboxId);
      expect(seen.network).toMatchObject({ mode: 'egress', allowOut: ['203.0.113.7'], denyOut: ['0.0.0.0/0'] });
      const info = await closed.getInfo();
      expect(info.allowInternetAccess).toBe(false);
      expect(info.network).toMatchObject({ allowOut: ['203.0.113.7'], denyOut: ['0.0.0.0/0'] });
    } finally {
      await closed.kill();
    }
  });

  test('bad input: wrong access token, unsupported options, unknown template', async () => {
    const res = await fetch(`${server.e2b.envdUrl}/process.Process/List`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'e2b-sandbox-id': sbx.sandboxId, 'x-access-token': 'wrong' },
      body: '{}',
    });
    expect(res.status).toBe(401);
    expect(((await res.json()) as { code: string }).code).toBe('unauthenticated');
    await expect(create({ network: { maskRequestHost: 'box.example.com' } })).rejects.toThrow(
      /maskRequestHost is not supported/,
    );
    await expect(create({ network: { allowOut: ['10.0.0.0/33'] } })).rejects.toThrow(/network\.allowOut\.0/);
    await expect(Sandbox.create('no-such-template')).rejects.toThrow(/template/i);
  });
});

describe('E2B persistence against Burrow', () => {
  test('pause keeps processes and files; connect resumes; snapshots and forks', async () => {
    const sbx = await create();
    try {
      const sleeper = await sbx.commands.run('sleep 3600', { background: true });
      await sbx.files.write('/home/user/kept.txt', 'kept');
      expect(await sbx.pause()).toBe(true);
      expect(await sbx.isRunning()).toBe(false);
      expect((await burrowView(sbx.sandboxId)).state).toBe('paused');
      expect(await sbx.pause()).toBe(false);
      await sbx.connect();
      expect(await sbx.isRunning()).toBe(true);
      expect((await sbx.commands.list()).map((p) => p.pid)).toContain(sleeper.pid);
      expect(await sbx.files.read('/home/user/kept.txt')).toBe('kept');

      const snapshot = await sbx.createSnapshot();
      const listed = await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems();
      expect(listed.map((s) => s.snapshotId)).toContain(snapshot.snapshotId);
      const restored = await Sandbox.create(snapshot.snapshotId, { timeoutMs: 120_000 });
      expect(await restored.files.read('/home/user/kept.txt')).toBe('kept');
      await restored.kill();
      expect(await Sandbox.deleteSnapshot(snapshot.snapshotId)).toBe(true);
      expect(await Sandbox.deleteSnapshot(snapshot.snapshotId)).toBe(false);

      const [child] = await sbx.fork();
      expect(child).not.toBeInstanceOf(Error);
      const forked = child as E2bSandbox;
      expect((await forked.commands.run('cat /home/user/kept.txt')).stdout).toBe('kept');
      expect((await burrowView(forked.sandboxId)).lineage.parentId).toBe(sbx.sandboxId);
      await forked.kill();
    } finally {
      await sbx.kill();
    }
    expect(await sbx.isRunning()).toBe(false);
  });
});
