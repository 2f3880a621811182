import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { startTestServer, type TestServer } from './burrow-test-server.js';
import { type CliRunOptions, runCli } from './cli-runner.js';

// The built CLI against a real server (no sandbox is created: tenant defaults are rows and arithmetic).
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

describe('burrow tenant defaults', () => {
  test('set, show (with sources) and quota shows them; bad input is refused', async () => {
    const set = await burrow([
      'tenant',
      'defaults',
      'set',
      '--tenant',
      'gov-cli',
      '--idle-timeout',
      '300000',
      '--paused-retention',
      '604800000',
      '--timeout-action',
      'pause',
      '--json',
    ]);
    expect(set.code, set.stderr).toBe(0);
    const json = JSON.parse(set.stdout) as { effective: Record<string, unknown>; sources: Record<string, string> };
    expect(json.effective).toMatchObject({ idleTimeoutMs: 300_000, pausedRetentionMs: 604_800_000, timeoutMs: null });
    expect(json.sources).toMatchObject({ idleTimeoutMs: 'tenant-default', maxAgeMs: 'server-default' });

    const show = await burrow(['tenant', 'defaults', 'show', '--tenant', 'gov-cli']);
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toMatch(/gov-cli\s+idleTimeoutMs\s+300000\s+tenant-default/);
    expect(show.stdout).toMatch(/gov-cli\s+timeoutMs\s+none\s+server-default/);

    const quota = await burrow(['quota', '--tenant', 'gov-cli']);
    expect(quota.code, quota.stderr).toBe(0);
    expect(quota.stdout).toMatch(/gov-cli\s+pausedRetentionMs\s+604800000\s+tenant-default/);

    const bad = await burrow(['tenant', 'defaults', 'set', '--tenant', 'gov-cli', '--timeout-action', 'explode']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/unknown timeout action "explode"/);
    const low = await burrow(['tenant', 'defaults', 'set', '--tenant', 'gov-cli', '--idle-timeout', '10']);
    expect(low.code).not.toBe(0);
    expect(low.stderr).toMatch(/invalid_request|idleTimeoutMs/);
  });

  test('sandbox info shows each policy with its source', async () => {
    const created = await burrow([
      'sandbox',
      'create',
      '--memory',
      '256',
      '--timeout',
      '600000',
      '--timeout-action',
      'delete',
    ]);
    expect(created.code, created.stderr).toBe(0);
    const id = created.stdout.trim();
    try {
      const info = await burrow(['sandbox', 'info', id]);
      expect(info.code, info.stderr).toBe(0);
      expect(info.stdout).toContain('timeout 600000 ms running → delete (request)');
      expect(info.stdout).toContain('idle 900000 ms → pause (server-default)');
    } finally {
      await burrow(['sandbox', 'delete', id]);
    }
  });
});
