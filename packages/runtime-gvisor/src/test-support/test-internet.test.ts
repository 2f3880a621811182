import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCommand } from '../run-command.js';
import { queryDns } from './dns-client.js';
import { startTestInternet, sweepTestInternets, type TestInternet } from './test-internet.js';

describe('test internet', () => {
  let internet: TestInternet;
  const many = Array.from({ length: 60 }, (_, i) => `198.18.255.${i + 1}`);

  beforeAll(async () => {
    internet = await startTestInternet({
      records: { 'www.test': ['@default'], 'other.test': ['@1'], 'many.test': many },
    });
  });
  afterAll(async () => {
    await internet?.close();
  });

  it('lives on a /28 of 198.18.0.0/15 behind a veth with short names', async () => {
    expect(internet.cidr).toMatch(/^198\.1[89]\.[0-9]+\.[0-9]+\/28$/);
    expect(internet.addresses).toHaveLength(3);
    const links = await runCommand('ip', ['-o', 'link', 'show']);
    const ours = [...links.stdout.matchAll(/^[0-9]+: (bti[0-9a-f]{6}h)@/gm)].map((m) => m[1] ?? '');
    expect(ours.some((name) => name.length <= 15 && internet.namespace.endsWith(name.slice(3, 9)))).toBe(true);
  });

  it("serves HTTP and HTTPS (trusting the run's CA) to the host and logs the requests", async () => {
    for (const address of internet.addresses) {
      const result = await runCommand('curl', ['-sS', '--max-time', '5', `http://${address}/`]);
      expect(result.stdout).toBe(`burrow test internet ${address}\n`);
    }
    const bytes = await runCommand('curl', [
      '-sS',
      '--max-time',
      '10',
      '-o',
      '/dev/null',
      '-w',
      '%{size_download}',
      `${internet.httpUrl}/bytes/1000000`,
    ]);
    expect(bytes.stdout).toBe('1000000');
    const secure = await runCommand('curl', [
      '-sS',
      '--max-time',
      '5',
      '--cacert',
      internet.tls.caCertPath,
      '--resolve',
      `www.test:443:${internet.addresses[0]}`,
      'https://www.test/',
    ]);
    expect(secure.stdout, secure.stderr).toBe(`burrow test internet ${internet.addresses[0]}\n`);
    const untrusted = await runCommand('curl', ['-sS', '--max-time', '5', `${internet.httpsUrl}/`]);
    expect(untrusted.exitCode).toBe(60);
    const requests = await internet.httpRequests();
    expect(requests.map((r) => `${r.scheme} ${r.path}`)).toEqual([
      'http /',
      'http /',
      'http /',
      'http /bytes/1000000',
      'https /',
    ]);
    expect(requests[0]?.from).toBe(internet.hostAddress);
  });

  it('answers DNS for *.test authoritatively over UDP and TCP and logs every query', async () => {
    const server = { server: internet.dns.address, port: internet.dns.port };
    const www = await queryDns({ ...server, name: 'WWW.test' });
    expect(www?.rcode).toBe('NOERROR');
    expect(www?.flag_aa).toBe(true);
    expect(www?.answers?.map((a) => a.data)).toEqual([internet.addresses[0]]);
    const other = await queryDns({ ...server, name: 'other.test', transport: 'tcp' });
    expect(other?.answers?.map((a) => a.data)).toEqual([internet.addresses[1]]);
    expect((await queryDns({ ...server, name: 'nothing.test' }))?.rcode).toBe('NXDOMAIN');
    expect((await queryDns({ ...server, name: 'example.com' }))?.rcode).toBe('REFUSED');
    const aaaa = await queryDns({ ...server, name: 'www.test', type: 'AAAA' });
    expect(aaaa?.rcode).toBe('NOERROR');
    expect(aaaa?.answers).toEqual([]);
    const truncated = await queryDns({ ...server, name: 'many.test' });
    expect(truncated?.flag_tc).toBe(true);
    const full = await queryDns({ ...server, name: 'many.test', transport: 'tcp' });
    expect(full?.answers?.map((a) => a.data)).toEqual(many);
    const queries = await internet.dnsQueries();
    expect(queries.map((q) => `${q.transport} ${q.type} ${q.name}`)).toEqual([
      'udp A www.test',
      'tcp A other.test',
      'udp A nothing.test',
      'udp A example.com',
      'udp AAAA www.test',
      'udp A many.test',
      'tcp A many.test',
    ]);
    expect(queries[0]?.from).toBe(internet.hostAddress);
  });

  it('serves its wheel from a PEP 503 index that pip downloads from', { timeout: 120_000 }, async () => {
    const dir = await mkdtemp(join(tmpdir(), 'burrow-pip-download-'));
    try {
      const result = await runCommand('python3', [
        '-m',
        'pip',
        'download',
        '--no-deps',
        '--disable-pip-version-check',
        '--no-cache-dir',
        '--index-url',
        internet.indexUrl,
        '--trusted-host',
        internet.dns.address,
        '--dest',
        dir,
        internet.wheel.name,
      ]);
      expect(result.exitCode, result.stderr).toBe(0);
      expect(await readdir(dir)).toEqual([internet.wheel.fileName]);
      const bytes = await readFile(join(dir, internet.wheel.fileName));
      expect(createHash('sha256').update(bytes).digest('hex')).toBe(internet.wheel.sha256);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('test internet teardown', () => {
  it('close removes the namespace, its veth and its servers', async () => {
    const internet = await startTestInternet({ sweep: false });
    const pids = (await runCommand('ip', ['netns', 'pids', internet.namespace])).stdout.trim().split('\n');
    expect(pids.length).toBeGreaterThan(0);
    await internet.close();
    expect((await runCommand('ip', ['netns', 'list'])).stdout).not.toContain(internet.namespace);
    expect((await runCommand('ip', ['-o', 'addr', 'show'])).stdout).not.toContain(`${internet.hostAddress}/28`);
    for (const pid of pids) expect(() => process.kill(Number(pid), 0)).toThrow();
    await internet.close();
  });

  it('the sweep removes a namespace whose owner died, with the processes inside, and keeps live ones', async () => {
    const live = await startTestInternet({ sweep: false });
    const owner = spawn('true');
    await new Promise((resolve) => owner.on('exit', resolve));
    const stale = `btinet-${owner.pid}-abcdef`;
    try {
      expect((await runCommand('ip', ['netns', 'add', stale])).exitCode).toBe(0);
      const inside = spawn('ip', ['netns', 'exec', stale, 'sleep', '600'], { stdio: 'ignore' });
      const insideExit = new Promise((resolve) => inside.on('exit', resolve));
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect((await runCommand('ip', ['netns', 'pids', stale])).stdout.trim()).not.toBe('');
      const removed = await sweepTestInternets();
      expect(removed).toContain(stale);
      expect(removed).not.toContain(live.namespace);
      await insideExit;
      expect(inside.signalCode).toBe('SIGKILL');
      expect((await runCommand('ip', ['netns', 'list'])).stdout).not.toContain(stale);
      expect(await sweepTestInternets({ olderThanMs: 0 })).toContain(live.namespace);
    } finally {
      await runCommand('ip', ['netns', 'delete', stale]);
      await live.close();
    }
  });
});
