import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GvisorDriver } from '@burrow/runtime-gvisor';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Burrow, createBurrow, loadConfig } from '../../packages/server/src/main.js';
import { GvisorTemplateBuilder } from '../../packages/server/src/node/gvisor-template-builder.js';
import { type Harness, startHarness } from './api-harness.js';

const TEMPLATES_DIR = '/var/tmp/burrow-test-templates';

describe('network policy: validation (fake driver)', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness();
  });
  afterAll(async () => h?.close());

  test.each([
    [{ mode: 'egress', allowOut: ['10.0.0.0/33'] }, '10.0.0.0/33'],
    [{ mode: 'egress', denyOut: ['exa*mple.com'] }, 'exa*mple.com'],
    [{ mode: 'egress', allowOut: ['a.*.example.com'] }, 'a.*.example.com'],
    [{ mode: 'egress', allowOut: ['2001:db8::/32'] }, '2001:db8::/32'],
    [{ mode: 'egress', allowOut: ['256.1.1.1'] }, '256.1.1.1'],
  ])('create with %j → invalid_request naming %s', async (network, entry) => {
    const res = await h.burrow.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: h.admin,
      payload: { network },
    });
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json().error.code).toBe('invalid_request');
    expect(res.json().error.message).toContain(entry);
  });

  test('more than 256 rules, an unknown mode and an unknown field are refused; defaults apply', async () => {
    const many = Array.from({ length: 257 }, (_, i) => `203.0.${Math.floor(i / 256)}.${i % 256}/32`);
    for (const network of [{ allowOut: many }, { mode: 'open' }, { mode: 'egress', allow: [] }]) {
      const res = await h.burrow.app.inject({
        method: 'POST',
        url: '/v1/sandboxes',
        headers: h.admin,
        payload: { network },
      });
      expect(res.statusCode, res.body).toBe(400);
      expect(res.json().error.code).toBe('invalid_request');
    }
    const plain = await h.burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: h.admin, payload: {} });
    expect(plain.statusCode, plain.body).toBe(201);
    expect(plain.json().network).toEqual({ mode: 'egress', allowOut: [], denyOut: [], egressMbps: null });
    const ruled = await h.burrow.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: h.admin,
      payload: { network: { denyOut: ['0.0.0.0/0'], allowOut: ['PyPI.org', '*.pythonhosted.org'], egressMbps: 50 } },
    });
    expect(ruled.statusCode, ruled.body).toBe(201);
    expect(ruled.json().network).toMatchObject({ mode: 'egress', egressMbps: 50, denyOut: ['0.0.0.0/0'] });
    // The fake driver has no network: an update says so instead of storing a policy nothing enforces.
    const update = await h.burrow.app.inject({
      method: 'PUT',
      url: `/v1/sandboxes/${ruled.json().id}/network`,
      headers: h.admin,
      payload: { mode: 'none' },
    });
    expect(update.statusCode, update.body).toBe(400);
    expect(update.json().error.message).toContain('no network');
  });
});

/** One namespace with an HTTP server on a public-range address (198.18/15), joined to the host by a veth. */
function testInternet(): { address: string; down(): void } {
  const tag = randomBytes(3).toString('hex');
  const octet = 1 + (Number.parseInt(tag, 16) % 250);
  const [netns, link, address] = [`bti-${tag}`, `bti${tag}h`, `198.18.${octet}.2`];
  const ip = (...args: string[]) => execFileSync('ip', args);
  ip('netns', 'add', netns);
  ip('link', 'add', link, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', netns);
  ip('addr', 'add', `198.18.${octet}.1/30`, 'dev', link);
  ip('link', 'set', link, 'up');
  ip('-n', netns, 'addr', 'add', `${address}/30`, 'dev', 'eth0');
  ip('-n', netns, 'link', 'set', 'eth0', 'up');
  const server: ChildProcess = spawn(
    'ip',
    ['netns', 'exec', netns, 'python3', '-m', 'http.server', '-b', address, '8080'],
    {
      stdio: 'ignore',
    },
  );
  return {
    address,
    down() {
      server.kill('SIGKILL');
      for (const args of [
        ['link', 'del', link],
        ['netns', 'del', netns],
      ]) {
        try {
          execFileSync('ip', args, { stdio: 'ignore' });
        } catch {}
      }
    },
  };
}

describe('network policy over the API (real runsc, real namespaces)', { timeout: 300_000 }, () => {
  let burrow: Burrow;
  let dataDir = '';
  let admin: Record<string, string> = {};
  let internet: ReturnType<typeof testInternet>;
  let driver: GvisorDriver;
  const created: string[] = [];
  const logger = pino({ level: process.env.BURROW_TEST_LOG ?? 'silent' });

  const open = async () => {
    const config = loadConfig({}, { dataDir, templatesDir: TEMPLATES_DIR, warmPool: [] });
    driver = new GvisorDriver({ dataDir, logger, network: {} });
    burrow = await createBurrow(config, {
      driver,
      templateBuilder: new GvisorTemplateBuilder({ templatesDir: TEMPLATES_DIR }),
      logger,
    });
    await burrow.services.templates.ensureBase();
    // The admin key is made once; a restarted server keeps it.
    const secret = await burrow.services.keys.ensureAdminKey();
    if (secret !== null) admin = { authorization: `Bearer ${secret}` };
  };
  const curl = async (id: string, url: string) => {
    const res = await burrow.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/exec`,
      headers: admin,
      payload: { cmd: `curl -s -o /dev/null -w '%{http_code}' -m 3 ${url} || echo FAIL` },
    });
    expect(res.statusCode, res.body).toBe(200);
    return Buffer.from(res.json().stdout as string, 'base64')
      .toString()
      .trim();
  };

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'burrow-net-api-'));
    internet = testInternet();
    await open();
  });
  afterAll(async () => {
    for (const id of created) await driver.delete(id).catch(() => undefined);
    await burrow?.close();
    internet?.down();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  test('create with a denylist, update to an allowlist and to none, survives a restart, delete leaves nothing', async () => {
    const url = `http://${internet.address}:8080/`;
    const sandboxes = created;
    const made = await burrow.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: admin,
      payload: { memoryMiB: 256, diskMiB: 256, network: { mode: 'egress', denyOut: [`${internet.address}/32`] } },
    });
    expect(made.statusCode, made.body).toBe(201);
    const id = made.json().id as string;
    sandboxes.push(id);
    expect(await curl(id, url)).toMatch(/FAIL|000/);
    const put = (payload: object) =>
      burrow.app.inject({ method: 'PUT', url: `/v1/sandboxes/${id}/network`, headers: admin, payload });
    const allow = await put({ denyOut: ['0.0.0.0/0'], allowOut: [`${internet.address}/32`] });
    expect(allow.statusCode, allow.body).toBe(200);
    expect(allow.json().network).toMatchObject({ mode: 'egress', allowOut: [`${internet.address}/32`] });
    expect(await curl(id, url)).toBe('200');
    const info = await burrow.app.inject({ method: 'GET', url: `/v1/sandboxes/${id}`, headers: admin });
    expect(info.json().network.usage.egressBytes).toBeGreaterThan(0);
    expect(info.json().network.usage.ingressBytes).toBeGreaterThan(0);
    const metrics = await burrow.app.inject({ method: 'GET', url: '/metrics', headers: admin });
    const line = metrics.body
      .split('\n')
      .find((l) => l.includes(`sandbox="${id}"`) && l.includes('direction="egress"'));
    expect(Number(line?.split(' ').at(-1))).toBeGreaterThan(0);
    // A bad update changes nothing.
    const bad = await put({ allowOut: ['not a cidr'] });
    expect(bad.statusCode).toBe(400);
    expect(await curl(id, url)).toBe('200');
    // Pause, change the policy while paused, resume: the first request follows the new policy.
    expect(
      (await burrow.app.inject({ method: 'POST', url: `/v1/sandboxes/${id}/pause`, headers: admin })).statusCode,
    ).toBe(200);
    expect((await put({ mode: 'none' })).statusCode).toBe(200);
    expect(
      (await burrow.app.inject({ method: 'POST', url: `/v1/sandboxes/${id}/resume`, headers: admin })).statusCode,
    ).toBe(200);
    expect(await curl(id, url)).toMatch(/FAIL|000/);
    // The policy is in the database: a restarted server shows and enforces it.
    await burrow.close();
    await open();
    const again = await burrow.app.inject({ method: 'GET', url: `/v1/sandboxes/${id}`, headers: admin });
    expect(again.json().network.mode).toBe('none');
    expect((await put({ mode: 'egress' })).statusCode).toBe(200);
    expect(await curl(id, url)).toBe('200');
    const deleted = await burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${id}`, headers: admin });
    expect(deleted.statusCode, deleted.body).toBeLessThan(300);
    expect(execFileSync('ip', ['netns', 'list']).toString()).not.toContain(id);
    const afterDelete = await put({ mode: 'none' });
    expect(afterDelete.statusCode).toBe(404);
    expect(afterDelete.json().error.code).toBe('sandbox_not_found');
  });
});
