/**
 * End to end: the built `burrow` binary against a REAL server (in-process, real runsc sandboxes, real SQLite).
 * Build first: `npm run build` (or `npx tsc -b packages/cli packages/server`).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Sandbox } from '@burrow/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './burrow-test-server.js';
import { type CliRunOptions, runCli } from './cli-runner.js';

const RUN_ID = `cli-${Date.now().toString(36)}`;
let server: TestServer;
let env: Record<string, string>;
let sandboxId = '';
const localDir = mkdtempSync(join(tmpdir(), 'burrow-cli-e2e-'));

const burrow = (args: string[], options: CliRunOptions = {}) =>
  runCli(args, { ...options, env: { ...env, ...options.env } });

beforeAll(async () => {
  server = await startTestServer();
  env = { BURROW_URL: server.apiUrl, BURROW_API_KEY: server.adminKey, BURROW_DATA_DIR: server.dataDir };
  const created = await burrow(['sandbox', 'create', '--label', `e2e=${RUN_ID}`, '--memory', '256', '--json']);
  if (created.code !== 0) throw new Error(`sandbox create failed (${created.code}): ${created.stderr}`);
  sandboxId = JSON.parse(created.stdout).id;
  console.info(`cli e2e: run ${RUN_ID}, sandbox ${sandboxId}, server ${server.apiUrl}`);
});

afterAll(async () => {
  try {
    if (server !== undefined) {
      for await (const left of Sandbox.listAll({
        apiUrl: server.apiUrl,
        apiKey: server.adminKey,
        labels: { e2e: RUN_ID },
      })) {
        await left.delete().catch(() => {});
      }
    }
  } finally {
    await server?.close();
    rmSync(localDir, { recursive: true, force: true });
  }
});

describe('burrow sandbox', () => {
  it('create --json printed a running sandbox', async () => {
    expect(sandboxId).toMatch(/^sbx_[0-9a-z]{20}$/);
    const info = await burrow(['sandbox', 'info', sandboxId, '--json']);
    expect(info.code).toBe(0);
    expect(JSON.parse(info.stdout)).toMatchObject({
      id: sandboxId,
      state: 'running',
      labels: { e2e: RUN_ID },
      resources: { memoryMiB: 256 },
    });
  });

  it('ls shows it in the table and in --json with a label filter', async () => {
    const table = await burrow(['sandbox', 'ls']);
    expect(table.code).toBe(0);
    expect(table.stdout.split('\n')[0]).toMatch(/^ID\s+STATE/);
    expect(table.stdout).toContain(sandboxId);
    const json = await burrow(['sandbox', 'ls', '--json', '--label', `e2e=${RUN_ID}`]);
    expect(JSON.parse(json.stdout).map((s: { id: string }) => s.id)).toEqual([sandboxId]);
    const none = await burrow(['sandbox', 'ls', '--json', '--label', `e2e=${RUN_ID}-other`]);
    expect(JSON.parse(none.stdout)).toEqual([]);
  });

  it('rejects invalid limits with the usage exit code and prints error + hint once', async () => {
    const result = await burrow(['sandbox', 'create', '--memory', '1']);
    expect(result.code).toBe(2);
    expect(result.stderr.match(/^error: /gm)).toHaveLength(1);
    expect(result.stdout).toBe('');
  });
});

describe('burrow exec', () => {
  it('prints 42 and exits 0', async () => {
    const result = await burrow(['exec', sandboxId, '--', 'python3', '-c', 'print(6*7)']);
    expect(result.stderr).toBe('');
    expect(result.stdout).toBe('42\n');
    expect(result.code).toBe(0);
  });

  it('exits with the remote exit code', async () => {
    const result = await burrow(['exec', sandboxId, '--', 'sh', '-c', 'echo oops >&2; exit 3']);
    expect(result.code).toBe(3);
    expect(result.stderr).toBe('oops\n');
  });

  it('exits 128+n when the command dies from a signal', async () => {
    const result = await burrow(['exec', sandboxId, '--', 'sh', '-c', 'kill -9 $$']);
    expect(result.code).toBe(137);
  });

  it('forwards piped stdin, passes --env and --cwd', async () => {
    const result = await burrow(
      [
        'exec',
        sandboxId,
        '--env',
        'GREETING=hi there',
        '--cwd',
        '/tmp',
        '--',
        'sh',
        '-c',
        'echo "$GREETING $(pwd)"; cat',
      ],
      { input: 'from stdin\n' },
    );
    expect(result.stdout).toBe('hi there /tmp\nfrom stdin\n');
    expect(result.code).toBe(0);
  });

  it('forwards Ctrl-C (SIGINT) to the remote command and exits 130', async () => {
    const started = Date.now();
    const result = await burrow(['exec', sandboxId, '--', 'sh', '-c', 'echo ready; exec sleep 30'], {
      interrupt: { signal: 'SIGINT', afterOutput: 'ready' },
    });
    expect(result.code).toBe(130);
    expect(Date.now() - started).toBeLessThan(15_000);
  });

  it('exits 124 with a message on timeout', async () => {
    const started = Date.now();
    const result = await burrow([
      'exec',
      sandboxId,
      '--timeout',
      '1000',
      '--',
      'sh',
      '-c',
      'echo before; exec sleep 30',
    ]);
    expect(result.code).toBe(124);
    expect(result.stdout).toBe('before\n');
    expect(result.stderr).toMatch(/timeout/);
    expect(Date.now() - started).toBeLessThan(15_000);
  });
});

describe('burrow files', () => {
  it('round-trips a binary file through put and get', async () => {
    const data = Buffer.concat([Buffer.from(Array.from({ length: 256 }, (_, i) => i)), randomBytes(300_000)]);
    const local = join(localDir, 'blob.bin');
    writeFileSync(local, data);
    const put = await burrow(['files', 'put', sandboxId, local, '/root/blob.bin']);
    expect(put.code).toBe(0);

    const back = join(localDir, 'back.bin');
    const get = await burrow(['files', 'get', sandboxId, '/root/blob.bin', back]);
    expect(get.code).toBe(0);
    expect(readFileSync(back).equals(data)).toBe(true);

    const toStdout = await burrow(['files', 'get', sandboxId, '/root/blob.bin', '-']);
    expect(toStdout.stdoutBytes.equals(data)).toBe(true);

    const sum = await burrow(['exec', sandboxId, '--', 'sha256sum', '/root/blob.bin']);
    expect(sum.stdout.split(' ')[0]).toBe(
      (await import('node:crypto')).createHash('sha256').update(data).digest('hex'),
    );

    const ls = await burrow(['files', 'ls', sandboxId, '/root', '--json']);
    expect(JSON.parse(ls.stdout)).toContainEqual(
      expect.objectContaining({ path: '/root/blob.bin', type: 'file', sizeBytes: data.length }),
    );
  });

  it('exits with the not-found code for a missing remote file', async () => {
    const result = await burrow(['files', 'get', sandboxId, '/root/nope.txt', '-']);
    expect(result.code).toBe(3);
    expect(result.stderr).toMatch(/^error: /);
  });
});

describe('burrow keys and templates', () => {
  it('lists the base template', async () => {
    const result = await burrow(['template', 'ls', '--json']);
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toContainEqual(expect.objectContaining({ name: 'base', state: 'ready' }));
  });

  it('creates a member key that works until it is revoked', async () => {
    const created = await burrow(['keys', 'create', `e2e-${RUN_ID}`, '--json']);
    expect(created.code).toBe(0);
    const { key, secret } = JSON.parse(created.stdout);
    expect(key.role).toBe('member');
    const asMember = await burrow(['sandbox', 'ls', '--json'], { env: { BURROW_API_KEY: secret } });
    expect(asMember.code).toBe(0);
    const listed = await burrow(['keys', 'ls', '--json']);
    expect(JSON.parse(listed.stdout).map((k: { id: string }) => k.id)).toContain(key.id);
    expect((await burrow(['keys', 'revoke', key.id])).code).toBe(0);
    const revoked = await burrow(['sandbox', 'ls'], { env: { BURROW_API_KEY: secret } });
    expect(revoked.code).toBe(4);
  });

  it('exits with the auth code and a hint for a bad key', async () => {
    const result = await burrow(['--api-key', 'bk_not_a_real_key', 'sandbox', 'ls']);
    expect(result.code).toBe(4);
    expect(result.stderr).toMatch(/^error: .+\nhint: /);
  });

  it('exits 1 with a hint about BURROW_URL when the server is unreachable', async () => {
    const result = await burrow(['sandbox', 'ls'], { env: { BURROW_URL: 'http://127.0.0.1:1' } });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('BURROW_URL');
  });
});

describe('burrow sandbox rm', () => {
  it('deletes the sandbox through its delete alias; info and rm then exit with the not-found code', async () => {
    const deleted = await burrow(['sandbox', 'delete', sandboxId]);
    expect(deleted.code).toBe(0);
    expect(deleted.stdout).toBe(`${sandboxId}\n`);
    const info = await burrow(['sandbox', 'info', sandboxId]);
    expect(info.code).toBe(3);
    expect(info.stderr).toMatch(/^error: /);
    const rm = await burrow(['sandbox', 'rm', sandboxId]);
    expect(rm.code).toBe(3);
    expect(rm.stderr).toMatch(/^error: /);
  });
});
