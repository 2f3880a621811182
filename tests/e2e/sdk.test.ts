/**
 * End to end: the SDK against a REAL server (in-process, real runsc sandboxes, real SQLite).
 */
import {
  AuthenticationError,
  BurrowClient,
  CommandExitError,
  CommandTimeoutError,
  ConnectionError,
  FileNotFoundError,
  FileSystemError,
  Sandbox,
  SandboxNotFoundError,
} from '@burrow/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './burrow-test-server.js';

const RUN_ID = `sdk-${Date.now().toString(36)}`;
let server: TestServer;
let sandbox: Sandbox;
const connection = () => ({ apiUrl: server.apiUrl, apiKey: server.adminKey });
const ALL_BYTES = new Uint8Array(Array.from({ length: 256 }, (_, i) => i));

beforeAll(async () => {
  server = await startTestServer();
  sandbox = await Sandbox.create({ ...connection(), labels: { e2e: RUN_ID }, env: { FROM_CREATE: 'yes' } });
  console.info(`sdk e2e: run ${RUN_ID}, sandbox ${sandbox.id}, server ${server.apiUrl}`);
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

describe('Sandbox', () => {
  it('creates a running sandbox and finds it again', async () => {
    expect(sandbox.info.state).toBe('running');
    expect(sandbox.info.labels).toEqual({ e2e: RUN_ID });
    const again = await Sandbox.get(sandbox.id, connection());
    expect(again.info.id).toBe(sandbox.id);
    expect((await sandbox.refresh()).state).toBe('running');
  });

  it('lists by label, one page and all pages', async () => {
    const second = await Sandbox.create({ ...connection(), labels: { e2e: RUN_ID, second: 'yes' } });
    try {
      const page = await Sandbox.list({ ...connection(), labels: { e2e: RUN_ID }, limit: 1 });
      expect(page.items).toHaveLength(1);
      expect(page.nextCursor).not.toBeNull();
      const all: string[] = [];
      for await (const found of Sandbox.listAll({ ...connection(), labels: { e2e: RUN_ID }, limit: 1 })) {
        all.push(found.id);
      }
      expect(all.sort()).toEqual([sandbox.id, second.id].sort());
      const onlySecond = await Sandbox.list({ ...connection(), labels: { e2e: RUN_ID, second: 'yes' } });
      expect(onlySecond.items.map((s) => s.id)).toEqual([second.id]);
    } finally {
      await second.delete();
    }
    await expect(Sandbox.get(second.id, connection())).rejects.toBeInstanceOf(SandboxNotFoundError);
  });
});

describe('commands.run', () => {
  it('runs argv and shell strings; a non-zero exit is data', async () => {
    const argv = await sandbox.commands.run(['python3', '-c', 'print(6*7)']);
    expect(argv).toMatchObject({ exitCode: 0, signal: null, timedOut: false, stdout: '42\n', stderr: '' });
    const shell = await sandbox.commands.run('echo $FROM_CREATE $EXTRA; echo err >&2; exit 3', {
      env: { EXTRA: 'x' },
    });
    expect(shell).toMatchObject({ exitCode: 3, stdout: 'yes x\n', stderr: 'err\n' });
    await expect(sandbox.commands.run('exit 3', { check: true })).rejects.toBeInstanceOf(CommandExitError);
  });

  it('keeps bytes exact over HTTP and over the stream, stdin included', async () => {
    const echo = ['python3', '-c', 'import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())'];
    const once = await sandbox.commands.run(echo, { stdin: ALL_BYTES });
    expect(once.stdoutBytes).toEqual(ALL_BYTES);
    const streamed = await sandbox.commands.run(echo, { stdin: ALL_BYTES, onStdout: () => {} });
    expect(streamed.stdoutBytes).toEqual(ALL_BYTES);
  });

  it('streams chunks to onStdout as they come, with multi-byte characters split across writes intact', async () => {
    const script = [
      'import sys, time',
      "data = 'é€😀'.encode()",
      'for i in range(len(data)):',
      '    sys.stdout.buffer.write(data[i:i+1]); sys.stdout.buffer.flush(); time.sleep(0.05)',
    ].join('\n');
    const chunks: string[] = [];
    const result = await sandbox.commands.run(['python3', '-c', script], { onStdout: (chunk) => chunks.push(chunk) });
    expect(chunks.join('')).toBe('é€😀');
    expect(chunks.join('')).not.toContain('\uFFFD');
    expect(chunks.length).toBeGreaterThan(1);
    expect(result.stdout).toBe('é€😀');
    expect(result.stdoutBytes).toEqual(new Uint8Array(Buffer.from('é€😀')));
  });

  it('throws CommandTimeoutError with the partial output, over HTTP and over the stream', async () => {
    for (const onStdout of [undefined, () => {}]) {
      const error = await sandbox.commands
        .run('echo before; exec sleep 30', { timeoutMs: 1000, onStdout })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(CommandTimeoutError);
      expect((error as CommandTimeoutError).code).toBe('exec_timeout');
      expect((error as CommandTimeoutError).result.stdout).toBe('before\n');
    }
  });
});

describe('commands.stream', () => {
  it('yields typed frames, takes stdin and signals', async () => {
    const stream = sandbox.commands.stream(['sh', '-c', 'read line; echo "got $line"; exec sleep 30']);
    stream.writeStdin('hello\n');
    const events = [];
    for await (const event of stream) {
      events.push(event);
      if (event.type === 'stdout') stream.kill('SIGTERM');
    }
    expect(events[0]).toEqual({ type: 'stdout', data: new Uint8Array(Buffer.from('got hello\n')) });
    expect(events.at(-1)).toMatchObject({ type: 'exit', exitCode: null, signal: 'SIGTERM', timedOut: false });
  });

  it('stops when its AbortSignal fires', async () => {
    const controller = new AbortController();
    const started = Date.now();
    setTimeout(() => controller.abort(), 500);
    const error = await (async () => {
      for await (const _ of sandbox.commands.stream('sleep 30', { signal: controller.signal })) {
        // nothing is printed
      }
    })().catch((e: unknown) => e);
    expect((error as { code?: string }).code).toBe('aborted');
    expect(Date.now() - started).toBeLessThan(5000);
  });
});

describe('files', () => {
  it('writes, reads, lists, stats, renames and removes', async () => {
    const info = await sandbox.files.write('/root/e2e/bin.dat', ALL_BYTES, { mode: 0o755 });
    expect(info).toMatchObject({ path: '/root/e2e/bin.dat', type: 'file', sizeBytes: 256, mode: 0o755 });
    expect(await sandbox.files.read('/root/e2e/bin.dat')).toEqual(ALL_BYTES);
    await sandbox.files.write('/root/e2e/hello.txt', 'héllo\n');
    expect(await sandbox.files.readText('/root/e2e/hello.txt')).toBe('héllo\n');
    expect((await sandbox.commands.run('cat /root/e2e/hello.txt')).stdout).toBe('héllo\n');

    await sandbox.files.mkdir('/root/e2e/sub/deeper');
    const names = (await sandbox.files.list('/root/e2e')).map((f) => f.name).sort();
    expect(names).toEqual(['bin.dat', 'hello.txt', 'sub']);
    const deep = (await sandbox.files.list('/root/e2e', { depth: 2 })).map((f) => f.path);
    expect(deep).toContain('/root/e2e/sub/deeper');

    await sandbox.files.rename('/root/e2e/hello.txt', '/root/e2e/sub/hello.txt');
    expect(await sandbox.files.exists('/root/e2e/hello.txt')).toBe(false);
    expect((await sandbox.files.stat('/root/e2e/sub/hello.txt')).sizeBytes).toBe(Buffer.byteLength('héllo\n'));

    await expect(sandbox.files.remove('/root/e2e/sub')).rejects.toBeInstanceOf(FileSystemError);
    await sandbox.files.remove('/root/e2e', { recursive: true });
    expect(await sandbox.files.exists('/root/e2e')).toBe(false);
    await expect(sandbox.files.read('/root/e2e/bin.dat')).rejects.toBeInstanceOf(FileNotFoundError);
  });
});

describe('errors and the client', () => {
  it('maps not-found, bad keys and unreachable servers to typed errors', async () => {
    const missing = await Sandbox.get('sbx_00000000000000000000', connection()).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(SandboxNotFoundError);
    expect((missing as SandboxNotFoundError).status).toBe(404);
    expect((missing as SandboxNotFoundError).requestId).not.toBe('');

    const badKey = await Sandbox.list({ apiUrl: server.apiUrl, apiKey: 'bk_wrong' }).catch((e: unknown) => e);
    expect(badKey).toBeInstanceOf(AuthenticationError);

    const unreachable = await Sandbox.get(sandbox.id, { apiUrl: 'http://127.0.0.1:1', apiKey: 'x' }).catch(
      (e: unknown) => e,
    );
    expect(unreachable).toBeInstanceOf(ConnectionError);
    expect((unreachable as ConnectionError).hint).toContain('BURROW_URL');
  });

  it('health, templates and keys', async () => {
    const client = new BurrowClient(connection());
    expect((await client.health()).status).toBe('ok');
    expect((await client.templates.list()).map((t) => t.name)).toContain('base');
    expect((await client.templates.get('base')).state).toBe('ready');
    const { key, secret } = await client.keys.create({ name: `e2e-${RUN_ID}` });
    expect(secret.length).toBeGreaterThan(16);
    expect((await client.keys.list()).map((k) => k.id)).toContain(key.id);
    await client.keys.revoke(key.id);
    await expect(new BurrowClient({ apiUrl: server.apiUrl, apiKey: secret }).keys.list()).rejects.toBeInstanceOf(
      AuthenticationError,
    );
  });
});
