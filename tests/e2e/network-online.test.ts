/**
 * End to end: sandboxes online through their policy and Burrow's resolver (real server, real runsc, real
 * namespaces). The "internet" is a test namespace with an HTTP server, a package index and an authoritative DNS
 * server for `*.test` that logs every query; the server's resolver forwards to it (BURROW_DNS_UPSTREAM).
 */

import { startTestInternet, type TestInternet } from '@burrow/runtime-gvisor/test-support';
import { Sandbox } from '@burrow/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './burrow-test-server.js';

const RUN_ID = `netonline-${Date.now().toString(36)}`;
let server: TestServer;
let internet: TestInternet;
const connection = () => ({ apiUrl: server.apiUrl, apiKey: server.adminKey });

beforeAll(async () => {
  internet = await startTestInternet({
    records: {
      'www.test': ['@default'],
      'allowed.test': ['@1'],
      'denied.test': ['@1'],
      'late.test': ['@2'],
      'a.x.test': ['@2'],
    },
  });
  server = await startTestServer({
    env: { BURROW_DNS_UPSTREAM: `${internet.dns.address}:${internet.dns.port}` },
  });
  console.info(`network-online e2e: run ${RUN_ID}, internet ${internet.namespace}, server ${server.apiUrl}`);
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
    await internet?.close();
  }
});

async function sh(sandbox: Sandbox, script: string, timeoutMs = 60_000) {
  return sandbox.commands.run(['/bin/sh', '-c', script], { timeoutMs });
}

/** HTTP status of `url` from inside the sandbox, or `000` when it cannot connect or resolve. */
async function curl(sandbox: Sandbox, url: string): Promise<string> {
  const result = await sh(sandbox, `curl -s -o /dev/null -m 5 -w '%{http_code}' ${url}`);
  return result.stdout.trim();
}

async function importsWheel(sandbox: Sandbox): Promise<string> {
  const result = await sh(
    sandbox,
    `python3 -c 'import ${internet.wheel.module}; print(${internet.wheel.module}.VALUE)'`,
  );
  return result.stdout.trim();
}

describe('a default sandbox online', () => {
  it('pip installs from the test index; pause/resume and fork keep the package and the network', async () => {
    const sandbox = await Sandbox.create({ ...connection(), labels: { e2e: RUN_ID } });
    const host = internet.addresses[0] ?? '';
    const pip = await sh(
      sandbox,
      `pip install --index-url ${internet.indexUrl} --trusted-host ${host} ${internet.wheel.name} 2>&1`,
      180_000,
    );
    expect(pip.exitCode, pip.stdout).toBe(0);
    expect(await importsWheel(sandbox)).toBe(internet.wheel.value);
    expect(await curl(sandbox, 'http://www.test/')).toBe('200');

    await sandbox.pause();
    await sandbox.resume();
    expect(await importsWheel(sandbox)).toBe(internet.wheel.value);
    // The first request by name after the resume: resolver and route answer at once.
    expect(await curl(sandbox, 'http://www.test/')).toBe('200');

    const [child] = await sandbox.fork({ count: 1 });
    if (child === undefined) throw new Error('fork returned no child');
    expect(await importsWheel(child)).toBe(internet.wheel.value);
    expect(await curl(child, 'http://www.test/')).toBe('200');
    // The parent keeps its network beside the child's.
    expect(await curl(sandbox, 'http://www.test/')).toBe('200');
  });
});

describe('a domain allowlist', () => {
  it('allows named domains and wildcards, keeps denied names from upstream, blocks other DNS, updates at once', async () => {
    const sandbox = await Sandbox.create({
      ...connection(),
      labels: { e2e: RUN_ID },
      network: { denyOut: ['0.0.0.0/0'], allowOut: ['allowed.test', '*.x.test'] },
    });
    expect(await curl(sandbox, 'http://allowed.test/')).toBe('200');
    expect(await curl(sandbox, 'http://a.x.test/')).toBe('200');
    expect(await curl(sandbox, 'http://denied.test/')).toBe('000');
    // Only what the resolver handed out opens: www.test's address is no allowed name's.
    expect(await curl(sandbox, `http://${internet.addresses[0]}/`)).toBe('000');
    const resolve = await sh(sandbox, `getent hosts denied.test; echo "exit=$?"`);
    expect(resolve.stdout).toContain('exit=2');

    // DNS straight to the authoritative server (not through Burrow's resolver) gets no answer.
    const query =
      "import socket,struct;q=struct.pack('>HHHHHH',4660,256,1,0,0,0)+b'\\x06direct\\x04test\\x00'+struct.pack('>HH',1,1);" +
      `s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.settimeout(2);s.sendto(q,('${internet.dns.address}',${internet.dns.port}))\n` +
      "try:\n s.recvfrom(512); print('ANSWERED')\nexcept Exception: print('BLOCKED')";
    const direct = await sandbox.commands.run(['python3', '-c', query], { timeoutMs: 30_000 });
    expect(direct.stdout.trim()).toBe('BLOCKED');
    const tcpDns = await sh(
      sandbox,
      `python3 -c "import socket;socket.create_connection(('${internet.dns.address}',${internet.dns.port}),2);print('OPEN')" 2>/dev/null || echo BLOCKED`,
    );
    expect(tcpDns.stdout.trim()).toBe('BLOCKED');

    const names = (await internet.dnsQueries()).map((query) => query.name.toLowerCase());
    expect(names).toContain('allowed.test');
    expect(names).not.toContain('denied.test');
    expect(names).not.toContain('direct.test');

    // A runtime update: the newly allowed name resolves and connects within about a second.
    expect(await curl(sandbox, 'http://late.test/')).toBe('000');
    await sandbox.network.update({
      denyOut: ['0.0.0.0/0'],
      allowOut: ['allowed.test', '*.x.test', 'late.test'],
    });
    const updatedAt = Date.now();
    let status = await curl(sandbox, 'http://late.test/');
    while (status !== '200' && Date.now() - updatedAt < 1000) status = await curl(sandbox, 'http://late.test/');
    expect(status).toBe('200');
  });
});

describe('several servers on one host', () => {
  it('each runs a resolver of its own: a second server starts, and both serve names to their sandboxes', async () => {
    const second = await startTestServer({
      env: { BURROW_DNS_UPSTREAM: `${internet.dns.address}:${internet.dns.port}` },
    });
    try {
      const other = await Sandbox.create({ apiUrl: second.apiUrl, apiKey: second.adminKey, labels: { e2e: RUN_ID } });
      try {
        expect(await curl(other, 'http://www.test/')).toBe('200');
      } finally {
        await other.delete();
      }
    } finally {
      await second.close();
    }
    const sandbox = await Sandbox.create({ ...connection(), labels: { e2e: RUN_ID } });
    expect(await curl(sandbox, 'http://www.test/')).toBe('200');
  });
});
