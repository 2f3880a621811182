/**
 * End to end: lifecycle commands of the built `burrow` binary against a REAL server (real runsc, real SQLite).
 * Build first: `npm run build`.
 */
import { Sandbox } from '@burrow/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './burrow-test-server.js';
import { type CliRunOptions, runCli } from './cli-runner.js';

const RUN_ID = `lifecycle-${Date.now().toString(36)}`;
let server: TestServer;
let env: Record<string, string>;
let sandboxId = '';

const burrow = (args: string[], options: CliRunOptions = {}) =>
  runCli(args, { ...options, env: { ...env, ...options.env } });

beforeAll(async () => {
  server = await startTestServer();
  env = { BURROW_URL: server.apiUrl, BURROW_API_KEY: server.adminKey, BURROW_DATA_DIR: server.dataDir };
  const created = await burrow([
    'sandbox',
    'create',
    '--label',
    `e2e=${RUN_ID}`,
    '--memory',
    '256',
    '--timeout',
    '600000',
    '--idle-timeout',
    '300000',
    '--max-age',
    '3600000',
    '--json',
  ]);
  if (created.code !== 0) throw new Error(`sandbox create failed (${created.code}): ${created.stderr}`);
  sandboxId = JSON.parse(created.stdout).id;
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
  }
});

describe('burrow lifecycle commands', () => {
  it('sandbox info --json shows expiresAt, the expiry and the idle deadline; set-timeout moves only the TTL', async () => {
    const info = JSON.parse((await burrow(['sandbox', 'info', sandboxId, '--json'])).stdout);
    expect(info).toMatchObject({ idleTimeoutMs: 300_000, maxAgeMs: 3_600_000, timeoutMs: 600_000 });
    expect(info.expiry).toMatchObject({ action: 'pause', reason: 'idle' });
    expect(info.expiresAt).toBe(info.expiry.at);
    expect(Date.parse(info.idleDeadlineAt)).toBeGreaterThan(Date.now());
    const set = await burrow(['sandbox', 'set-timeout', sandboxId, '1200000']);
    expect(set.code, set.stderr).toBe(0);
    expect(Date.parse(set.stdout.trim())).toBeGreaterThan(Date.now() + 1_100_000);
    const after = JSON.parse((await burrow(['sandbox', 'info', sandboxId, '--json'])).stdout);
    expect(after.maxAgeMs).toBe(3_600_000);
    expect(after.idleTimeoutMs).toBe(300_000);
    const human = await burrow(['sandbox', 'info', sandboxId]);
    expect(human.stdout).toMatch(/idle deadline:\s+\d{4}-/);
    const bad = await burrow(['sandbox', 'set-timeout', sandboxId, 'soon']);
    expect(bad.code).not.toBe(0);
  });

  it('events lists the creation with its actor; events --follow streams until interrupted', async () => {
    const listed = await burrow(['events', '--sandbox', sandboxId, '--json']);
    expect(listed.code, listed.stderr).toBe(0);
    const items = JSON.parse(listed.stdout).items as Array<{ type: string; actor: string }>;
    expect(items[0]).toMatchObject({ type: 'created' });
    expect(items[0]?.actor).toMatch(/^key_/);
    const followed = await burrow(['events', '--follow', '--sandbox', sandboxId], {
      interrupt: { signal: 'SIGINT', afterOutput: 'created' },
      timeoutMs: 30_000,
    });
    expect(followed.stdout).toContain(`created\t${sandboxId}`);
  });

  it('quota shows usage; an admin sets limits; webhooks add, ls, rm', async () => {
    const quota = JSON.parse((await burrow(['quota', '--json'])).stdout);
    expect(quota.usage.sandboxes).toBeGreaterThanOrEqual(1);
    const set = await burrow(['quota', '--set', '--tenant', 'other', '--max-running', '3', '--json']);
    expect(set.code, set.stderr).toBe(0);
    expect(JSON.parse(set.stdout).limits).toMatchObject({ maxRunning: 3, maxSandboxes: null });
    const added = await burrow(['webhooks', 'add', 'http://203.0.113.9:9/hook', '--type', 'warning', '--json']);
    expect(added.code, added.stderr).toBe(0);
    const { webhook, secret } = JSON.parse(added.stdout);
    expect(secret).toMatch(/^whsec_/);
    expect((await burrow(['webhooks', 'ls'])).stdout).toContain(webhook.id);
    expect((await burrow(['webhooks', 'rm', webhook.id])).code).toBe(0);
    const again = await burrow(['webhooks', 'rm', webhook.id]);
    expect(again.code).not.toBe(0);
    expect(again.stderr).toMatch(/no webhook/);
  });
});
