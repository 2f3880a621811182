import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { startTestServer, type TestServer } from './burrow-test-server.js';
import { type CliRunOptions, runCli } from './cli-runner.js';

// The built CLI against a real server; no sandbox is created (keys, audit and usage are rows and arithmetic).
let server: TestServer;
let env: Record<string, string>;
const burrow = (args: string[], options: CliRunOptions = {}) =>
  runCli(args, { ...options, env: { ...env, ...options.env } });

beforeAll(async () => {
  server = await startTestServer();
  env = { BURROW_URL: server.apiUrl, BURROW_API_KEY: server.adminKey, BURROW_DATA_DIR: server.dataDir };
});
afterAll(async () => {
  await server?.close();
});

describe('burrow keys create with scopes', () => {
  test('--scope, --label and --ttl make a key that reaches only what it names; ls shows them', async () => {
    const created = await burrow([
      'keys',
      'create',
      'agent',
      '--scope',
      'commands,files',
      '--label',
      'task=t1',
      '--ttl',
      '1h',
      '--json',
    ]);
    expect(created.code, created.stderr).toBe(0);
    const { key, secret } = JSON.parse(created.stdout);
    expect(key).toMatchObject({
      scopes: ['commands', 'files'],
      restriction: { type: 'labels', labels: { task: 't1' } },
    });
    expect(Date.parse(key.expiresAt) - Date.parse(key.createdAt)).toBe(3_600_000);
    // Tenant-wide calls are refused to a restricted key: the auth exit code, with the reason.
    const ls = await burrow(['sandbox', 'ls'], { env: { BURROW_API_KEY: secret } });
    expect(ls.code).toBe(4);
    expect(ls.stderr).toMatch(/lacks the sandboxes:read scope/);
    const listed = await burrow(['keys', 'ls']);
    expect(listed.stdout).toMatch(
      new RegExp(`${key.id}\\s+agent\\s+default\\s+member\\s+commands,files\\s+labels task=t1`),
    );

    const viewer = JSON.parse((await burrow(['keys', 'create', 'looker', '--role', 'viewer', '--json'])).stdout);
    expect((await burrow(['sandbox', 'ls'], { env: { BURROW_API_KEY: viewer.secret } })).code).toBe(0);
  });

  test('bad input: unknown scope, unknown sandbox, bad ttl, both restrictions', async () => {
    const scope = await burrow(['keys', 'create', 'x', '--scope', 'sandboxes:rule']);
    expect(scope.code).not.toBe(0);
    expect(scope.stderr).toMatch(/sandboxes:rule|scopes/);
    const sandbox = await burrow(['keys', 'create', 'x', '--sandbox', 'sbx_00000000000000000000']);
    expect(sandbox.code).not.toBe(0);
    expect(sandbox.stderr).toMatch(/has no sandbox sbx_00000000000000000000/);
    const ttl = await burrow(['keys', 'create', 'x', '--ttl', 'soon']);
    expect(ttl.code).not.toBe(0);
    expect(ttl.stderr).toMatch(/--ttl must be a duration/);
    const both = await burrow(['keys', 'create', 'x', '--sandbox', 'sbx_00000000000000000000', '--label', 'a=b']);
    expect(both.stderr).toMatch(/--sandbox or --label, not both/);
  });
});

describe('burrow audit', () => {
  test('lists, exports JSON lines, follows, and verify names an edited or removed row', async () => {
    // Something refused and something changed (the earlier tests' key creations and refusals are there too).
    expect((await burrow(['sandbox', 'ls'], { env: { BURROW_API_KEY: 'bk_not_a_key' } })).code).toBe(4);
    const table = await burrow(['audit', '--result', 'refused']);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(/refused\t401\tGET \/v1\/sandboxes\t-\t-\tno key\t127\.0\.0\.1\tunauthorized/);

    const exported = await burrow(['audit', 'export']);
    expect(exported.code, exported.stderr).toBe(0);
    const lines = exported.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { id: string; action: string });
    expect(lines.length).toBeGreaterThanOrEqual(4);
    expect(lines.map((r) => r.action)).toContain('POST /v1/keys');

    const following = burrow(['audit', '--follow', '--json', '--action', 'DELETE'], {
      interrupt: { signal: 'SIGINT', afterOutput: 'DELETE /v1/keys/:id' },
      timeoutMs: 30_000,
    });
    const created = JSON.parse((await burrow(['keys', 'create', 'to-go', '--json'])).stdout) as { key: { id: string } };
    expect((await burrow(['keys', 'revoke', created.key.id])).code).toBe(0);
    const followed = await following;
    expect(JSON.parse(followed.stdout.trim().split('\n')[0] ?? '{}')).toMatchObject({
      action: 'DELETE /v1/keys/:id',
      target: created.key.id,
      result: 'ok',
    });

    const ok = await burrow(['audit', 'verify']);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/^ok: \d+ records chain correctly/);
    const db = new Database(join(server.dataDir, 'burrow.db'));
    try {
      db.prepare("UPDATE audit_log SET target = 'sbx_someone_else' WHERE seq = 2").run();
      db.prepare('DELETE FROM audit_log WHERE seq = 3').run();
    } finally {
      db.close();
    }
    const broken = await burrow(['audit', 'verify']);
    expect(broken.code).toBe(1);
    expect(broken.stdout).toBe('edited 2: record 2 was changed\nremoved 3: record 3 is missing\n');
  });
});

describe('burrow usage', () => {
  test('prints a table and JSON; from after to is a usage error', async () => {
    const table = await burrow(['usage', '--group-by', 'day']);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(/^DAY\s+RUNNING_S\s+VCPU_S/);
    expect(table.stdout).toMatch(/\nTOTAL\s+0\s+0/);
    const json = await burrow(['usage', '--json', '--group-by', 'label:team']);
    expect(JSON.parse(json.stdout)).toMatchObject({ tenantId: 'default', groupBy: 'label:team', groups: [] });
    const bad = await burrow(['usage', '--from', '2026-12-02T00:00:00Z', '--to', '2026-12-01T00:00:00Z']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/`from` is after `to`/);
  });
});
