import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createSocket, type Socket } from 'node:dgram';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NetworkPolicy, Resources } from '@burrow/contract';
import type { TemplateRef } from '@burrow/runtime';
import { runInSandbox, testSandboxId } from '@burrow/runtime/conformance';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GvisorDriver } from '../gvisor-driver.js';
import { buildTemplate } from '../template-builder.js';

const TEST_TEMPLATES_DIR = '/var/tmp/burrow-test-templates';
const RESOURCES: Resources = { cpuCount: 1, memoryMiB: 256, diskMiB: 512 };
const EGRESS: NetworkPolicy = { mode: 'egress', allowOut: [], denyOut: [] };

/** Bytes of `/slow`, sent in 1000-byte pieces 50 ms apart (about 10 s). */
const SLOW_BYTES = 200_000;

/**
 * An HTTP server answering `/slow` with {@link SLOW_BYTES} trickled out and every other GET with
 * `ok <its address>`; started in the test's "internet" namespace.
 */
const WEB_SERVER = `
import http.server, socketserver, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == '/slow':
            self.send_response(200); self.send_header('Content-Length', '${SLOW_BYTES}'); self.end_headers()
            for _ in range(${SLOW_BYTES / 1000}):
                self.wfile.write(b'x' * 1000); self.wfile.flush(); time.sleep(0.05)
            return
        body = ('ok ' + self.connection.getsockname()[0]).encode()
        self.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer): daemon_threads = True
S(('0.0.0.0', 8080), H).serve_forever()
`;

/** Python inside the sandbox: GET url, print the body or `FAIL <error>`; 3 s bound. */
const fetchScript = (url: string) =>
  `import urllib.request\ntry:\n print(urllib.request.urlopen(${JSON.stringify(url)}, timeout=3).read().decode())\nexcept Exception as e:\n print('FAIL', type(e).__name__)`;

/**
 * A test "internet": a namespace joined to the host by a veth, holding a public address (198.18/15 is a benchmark
 * range, which the policy treats as public), a second public address, a private one (10.99/16) and the cloud
 * metadata address, all served by one HTTP server on :8080, plus a UDP echo on :53.
 */
class TestInternet {
  readonly tag = randomBytes(3).toString('hex');
  readonly netns = `bti-${this.tag}`;
  readonly hostLink = `bti${this.tag}h`;
  readonly octet = 1 + (Number.parseInt(this.tag, 16) % 250);
  readonly hostSide = `198.18.${this.octet}.1`;
  readonly publicAddress = `198.18.${this.octet}.2`;
  readonly otherPublic = `198.19.${this.octet}.2`;
  readonly privateAddress = `10.99.${this.octet}.2`;
  private readonly servers: ChildProcess[] = [];

  up(): void {
    const ip = (...args: string[]) => execFileSync('ip', args);
    ip('netns', 'add', this.netns);
    ip('link', 'add', this.hostLink, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', this.netns);
    ip('addr', 'add', `${this.hostSide}/30`, 'dev', this.hostLink);
    ip('link', 'set', this.hostLink, 'up');
    ip('-n', this.netns, 'addr', 'add', `${this.publicAddress}/30`, 'dev', 'eth0');
    ip('-n', this.netns, 'link', 'set', 'eth0', 'up');
    ip('-n', this.netns, 'link', 'set', 'lo', 'up');
    for (const extra of [this.otherPublic, this.privateAddress, '169.254.169.254']) {
      ip('-n', this.netns, 'addr', 'add', `${extra}/32`, 'dev', 'lo');
      ip('route', 'add', `${extra}/32`, 'via', this.publicAddress);
    }
    ip('-n', this.netns, 'route', 'add', 'default', 'via', this.hostSide);
    const inNs = ['netns', 'exec', this.netns];
    this.servers.push(spawn('ip', [...inNs, 'python3', '-c', WEB_SERVER], { stdio: 'ignore' }));
    const echo =
      "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('0.0.0.0',53))\nwhile True:\n d,a=s.recvfrom(512); s.sendto(d,a)";
    this.servers.push(spawn('ip', [...inNs, 'python3', '-c', echo], { stdio: 'ignore' }));
  }

  down(): void {
    for (const server of this.servers) server.kill('SIGKILL');
    for (const extra of [this.otherPublic, this.privateAddress, '169.254.169.254']) {
      try {
        execFileSync('ip', ['route', 'del', `${extra}/32`, 'via', this.publicAddress], { stdio: 'ignore' });
      } catch {}
    }
    try {
      execFileSync('ip', ['link', 'del', this.hostLink], { stdio: 'ignore' });
    } catch {}
    try {
      execFileSync('ip', ['netns', 'del', this.netns], { stdio: 'ignore' });
    } catch {}
  }
}

describe('per-sandbox network with egress policy (real runsc, real namespaces)', { timeout: 600_000 }, () => {
  let dataDir: string;
  let driver: GvisorDriver;
  let template: TemplateRef;
  const internet = new TestInternet();
  /** The host's own listener (stands in for Burrow's API and anything else on the host). */
  let hostServer: ChildProcess;
  const hostPort = 20_000 + (Number.parseInt(internet.tag, 16) % 20_000);
  /** The test resolver: echoes each datagram, records the source address it came from. */
  let resolver: Socket;
  const resolverSources: string[] = [];
  const resolverPort = 40_000 + (Number.parseInt(internet.tag, 16) % 20_000);
  const created = new Set<string>();

  const py = async (id: string, code: string): Promise<string> => {
    const run = await runInSandbox(driver, id, ['python3', '-c', code]);
    return `${run.stdout.toString()}${run.stderr.toString()}`.trim();
  };
  const get = (id: string, url: string) => py(id, fetchScript(url));
  const create = async (policy: NetworkPolicy) => {
    const id = testSandboxId();
    created.add(id);
    await driver.create({ sandboxId: id, template, resources: RESOURCES, hostname: 'net-test', network: policy });
    return id;
  };
  const udp = (host: string, port: number) =>
    `import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.settimeout(2)\ntry:\n s.sendto(b'q',(${JSON.stringify(host)},${port})); print('ANSWER', s.recvfrom(64)[0].decode())\nexcept Exception as e:\n print('FAIL', type(e).__name__)`;
  const tcp = (host: string, port: number) =>
    `import socket\ntry:\n socket.create_connection((${JSON.stringify(host)},${port}),2); print('CONNECTED')\nexcept Exception as e:\n print('FAIL', type(e).__name__)`;
  const hostResources = () => ({
    netns: execFileSync('ip', ['netns', 'list']).toString(),
    links: execFileSync('ip', ['-o', 'link']).toString(),
  });

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'burrow-net-test-'));
    template = await buildTemplate({ templatesDir: TEST_TEMPLATES_DIR, apt: [], run: [] });
    internet.up();
    driver = new GvisorDriver({
      dataDir,
      maxProcesses: 256,
      network: { resolver: { address: '10.231.0.1', port: resolverPort } },
    });
    await driver.networks?.prepareHost();
    resolver = createSocket('udp4');
    resolver.on('message', (message, remote) => {
      resolverSources.push(remote.address);
      resolver.send(Buffer.concat([Buffer.from('echo:'), message]), remote.port, remote.address);
    });
    await new Promise<void>((resolve) => resolver.bind(resolverPort, '10.231.0.1', resolve));
    hostServer = spawn('python3', ['-m', 'http.server', '-b', '0.0.0.0', String(hostPort)], { stdio: 'ignore' });
  });

  afterAll(async () => {
    for (const id of created) await driver.delete(id).catch(() => undefined);
    const left = await readdir(join(dataDir, 'sandboxes')).catch(() => []);
    for (const id of left) await driver.delete(id).catch(() => undefined);
    hostServer?.kill('SIGKILL');
    resolver?.close();
    internet.down();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('reaches the internet, never the host, private ranges, metadata or another resolver', async () => {
    const id = await create(EGRESS);
    expect(await get(id, `http://${internet.publicAddress}:8080/`)).toBe(`ok ${internet.publicAddress}`);
    // The host itself: every address it has, the sandboxes' gateway, loopback.
    for (const host of [internet.hostSide, '10.231.0.1', '127.0.0.1']) {
      expect(await get(id, `http://${host}:${hostPort}/`)).toMatch(/^FAIL/);
    }
    expect(await get(id, `http://${internet.privateAddress}:8080/`)).toMatch(/^FAIL/);
    // Cloud metadata in every spelling: dotted, decimal, hex, octal.
    for (const spelling of ['169.254.169.254', '2852039166', '0xa9fea9fe', '0251.0376.0251.0376']) {
      expect(await get(id, `http://${spelling}:8080/`)).toMatch(/^FAIL/);
    }
    const curl = await runInSandbox(driver, id, ['curl', '-sS', '-m', '3', 'http://0xa9fea9fe:8080/']);
    expect(curl.exitCode).not.toBe(0);
    expect(await py(id, tcp('224.0.0.1', 8080))).toMatch(/^FAIL/);
    // DNS: the gateway's port 53 is the resolver; any other server and TCP 53 are blocked.
    expect(await py(id, udp('192.168.127.1', 53))).toBe('ANSWER echo:q');
    const uplink = await driver.networks?.uplinkAddress(id);
    expect(resolverSources).toContain(uplink);
    expect((await driver.networks?.sandboxForSourceAddress(uplink ?? ''))?.sandboxId).toBe(id);
    expect(await py(id, udp(internet.publicAddress, 53))).toMatch(/^FAIL/);
    expect(await py(id, tcp(internet.publicAddress, 53))).toMatch(/^FAIL/);
    // IPv6: the guest has none.
    expect(await py(id, tcp('::1', 1))).toMatch(/^FAIL/);
  });

  it('a relay inside gains nothing; another sandbox is unreachable', async () => {
    const [a, b] = [await create(EGRESS), await create(EGRESS)];
    const relay =
      `import socket,threading\nl=socket.socket(); l.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); l.bind(('127.0.0.1',9000)); l.listen()\n` +
      `def pipe(x,y):\n  while (d:=x.recv(65536)): y.sendall(d)\n` +
      `while True:\n c,_=l.accept()\n try:\n  u=socket.create_connection((${JSON.stringify(internet.privateAddress)},8080),2)\n except Exception: c.close(); continue\n threading.Thread(target=pipe,args=(c,u)).start(); threading.Thread(target=pipe,args=(u,c)).start()`;
    await writeFile(join(driver.rootDir(a), 'root/relay.py'), relay);
    await driver.spawn(a, { argv: ['python3', '/root/relay.py'], env: { PATH: '/usr/bin:/bin' }, cwd: '/' });
    for (let i = 0; i < 50 && !(await py(a, tcp('127.0.0.1', 9000))).startsWith('CONNECTED'); i++) {
      await new Promise((r) => setTimeout(r, 200));
    }
    // The relay runs (it accepts), yet what it relays to stays unreachable.
    expect(await py(a, tcp('127.0.0.1', 9000))).toBe('CONNECTED');
    expect(await get(a, 'http://127.0.0.1:9000/')).toMatch(/^FAIL/);
    const bUplink = (await driver.networks?.uplinkAddress(b)) ?? '';
    expect(bUplink).not.toBe(await driver.networks?.uplinkAddress(a));
    expect(await py(a, tcp(bUplink, 8080))).toMatch(/^FAIL/);
    expect(await py(a, udp(bUplink, resolverPort))).toMatch(/^FAIL/);
  });

  it('allowlists, denylists, resolved addresses and mode none apply at runtime', async () => {
    const id = await create({ mode: 'egress', allowOut: [], denyOut: [`${internet.otherPublic}/32`] });
    expect(await get(id, `http://${internet.otherPublic}:8080/`)).toMatch(/^FAIL/);
    expect(await get(id, `http://${internet.publicAddress}:8080/`)).toMatch(/^ok/);
    // Allowlist: deny everything, allow one CIDR and a private range.
    await driver.updateNetwork(id, {
      mode: 'egress',
      allowOut: [`${internet.publicAddress}/32`, `10.99.${internet.octet}.0/24`],
      denyOut: ['0.0.0.0/0'],
    });
    expect(await get(id, `http://${internet.publicAddress}:8080/`)).toMatch(/^ok/);
    expect(await get(id, `http://${internet.privateAddress}:8080/`)).toBe(`ok ${internet.privateAddress}`);
    expect(await get(id, `http://${internet.otherPublic}:8080/`)).toMatch(/^FAIL/);
    // What the resolver hands out is allowed for its TTL.
    await driver.networks?.allowResolvedAddresses(id, [internet.otherPublic, '2001:db8::1'], 3);
    expect(await get(id, `http://${internet.otherPublic}:8080/`)).toMatch(/^ok/);
    // A resolved address in an always-denied range (DNS rebinding) stays blocked.
    await driver.updateNetwork(id, {
      mode: 'egress',
      allowOut: [`${internet.publicAddress}/32`],
      denyOut: ['0.0.0.0/0'],
    });
    await driver.networks?.allowResolvedAddresses(id, [internet.privateAddress, internet.otherPublic], 3);
    expect(await get(id, `http://${internet.privateAddress}:8080/`)).toMatch(/^FAIL/);
    await new Promise((r) => setTimeout(r, 4000));
    expect(await get(id, `http://${internet.otherPublic}:8080/`)).toMatch(/^FAIL/);
    await driver.updateNetwork(id, { mode: 'none', allowOut: [], denyOut: [] });
    expect(await get(id, `http://${internet.publicAddress}:8080/`)).toMatch(/^FAIL/);
    expect(await py(id, udp('192.168.127.1', 53))).toMatch(/^FAIL/);
    // egressMbps is a token bucket on the router's uplink.
    await driver.updateNetwork(id, { mode: 'egress', allowOut: [], denyOut: [], egressMbps: 40 });
    const router = (await readdir('/run/netns')).find((name) => name.includes(id) && name.endsWith('-r')) ?? '';
    expect(execFileSync('tc', ['-n', router, 'qdisc', 'show', 'dev', 'up0']).toString()).toMatch(/tbf .*rate 40Mbit/);
    await driver.updateNetwork(id, { mode: 'egress', allowOut: [], denyOut: [] });
    expect(execFileSync('tc', ['-n', router, 'qdisc', 'show', 'dev', 'up0']).toString()).not.toMatch(/tbf/);
    const usage = await driver.networkUsage(id);
    expect(usage?.egressBytes).toBeGreaterThan(0);
    expect(usage?.ingressBytes).toBeGreaterThan(0);
  });

  it('survives pause/resume, stop/start and fork; children inherit the policy; delete leaves nothing', async () => {
    const policy: NetworkPolicy = { mode: 'egress', allowOut: [], denyOut: [`${internet.otherPublic}/32`] };
    const id = await create(policy);
    const options = { sandboxId: id, template, resources: RESOURCES, hostname: 'net-test', network: policy };
    expect(await get(id, `http://${internet.publicAddress}:8080/`)).toMatch(/^ok/);
    await driver.pause(id);
    await driver.resume(options);
    expect(await get(id, `http://${internet.publicAddress}:8080/`)).toMatch(/^ok/);
    await driver.stop(id);
    await driver.create(options);
    expect(await get(id, `http://${internet.publicAddress}:8080/`)).toMatch(/^ok/);
    const children = [testSandboxId(), testSandboxId()];
    for (const child of children) created.add(child);
    await driver.fork(id, {
      template,
      resources: RESOURCES,
      network: policy,
      children: children.map((sandboxId) => ({ sandboxId, hostname: 'net-child' })),
    });
    const uplinks = new Set([await driver.networks?.uplinkAddress(id)]);
    for (const child of children) {
      expect(await get(child, `http://${internet.publicAddress}:8080/`)).toMatch(/^ok/);
      expect(await get(child, `http://${internet.otherPublic}:8080/`)).toMatch(/^FAIL/);
      uplinks.add(await driver.networks?.uplinkAddress(child));
    }
    expect(uplinks.size).toBe(3);
    expect(await get(id, `http://${internet.publicAddress}:8080/`)).toMatch(/^ok/);
    const links = [id, ...children].map((s) => driver.networks?.hostLink(s) ?? '');
    for (const sandboxId of [id, ...children]) {
      await driver.delete(sandboxId);
      created.delete(sandboxId);
    }
    const after = hostResources();
    for (const sandboxId of [id, ...children]) expect(after.netns).not.toContain(sandboxId);
    for (const link of links) expect(after.links).not.toContain(`${link}@`);
    expect((await driver.listHostResources()).sandboxIds).not.toContain(id);
  });

  it('a pause in the middle of a download: the open connection fails at once with ECONNABORTED (no hang), new connections work from the first one', async () => {
    const id = await create(EGRESS);
    const options = { sandboxId: id, template, resources: RESOURCES, hostname: 'net-test', network: EGRESS };
    const download = [
      'import urllib.request',
      'n = 0',
      'try:',
      ` r = urllib.request.urlopen('http://${internet.publicAddress}:8080/slow', timeout=60)`,
      ' while True:',
      '  b = r.read(1000)',
      '  if not b: break',
      '  n += len(b)',
      '  open("/root/progress", "w").write(str(n))',
      " print('DONE', n)",
      'except Exception as e:',
      " print('FAIL', n, type(e).__name__, e)",
    ].join('\n');
    await writeFile(join(driver.rootDir(id), 'root', 'download.py'), download);
    await runInSandbox(driver, id, ['sh', '-c', 'python3 /root/download.py > /root/download.out 2>&1 &']);
    // Paused once a part of the body has arrived, and held for 3 s while the server keeps sending.
    let progress = 0;
    for (let i = 0; i < 200 && progress < 20_000; i++) {
      const text = await py(
        id,
        'import os\nprint(open("/root/progress").read() if os.path.exists("/root/progress") else 0)',
      );
      progress = Number.parseInt(text, 10);
      if (progress < 20_000) await new Promise((r) => setTimeout(r, 100));
    }
    expect(progress).toBeGreaterThanOrEqual(20_000);
    expect(progress).toBeLessThan(SLOW_BYTES);
    await driver.pause(id);
    await new Promise((r) => setTimeout(r, 3000));
    await driver.resume(options);
    // The first new connection after the resume succeeds (no stale neighbour entry, no dead translation).
    expect(await get(id, `http://${internet.publicAddress}:8080/`)).toMatch(/^ok/);
    let out = '';
    for (let i = 0; i < 300 && !/^(DONE|FAIL)/.test(out); i++) {
      out = (await py(id, 'print(open("/root/download.out").read())').catch(() => '')).trim();
      if (!/^(DONE|FAIL)/.test(out)) await new Promise((r) => setTimeout(r, 100));
    }
    // runsc --net-disconnect-ok aborts connections to the outside at the checkpoint (docs/network.md).
    expect(out).toMatch(/^FAIL \d+ ConnectionAbortedError/);
    // The program can retry at once: the whole body arrives over a new connection.
    expect(
      await py(
        id,
        `import urllib.request\nprint(len(urllib.request.urlopen('http://${internet.publicAddress}:8080/slow', timeout=60).read()))`,
      ),
    ).toBe(String(SLOW_BYTES));
  });

  it('re-points existing routers at a new resolver port; lists the network of a sandbox that has nothing else on the host, and delete removes it (the orphan reaper)', async () => {
    const id = testSandboxId();
    created.add(id);
    await mkdir(driver.paths(id).dir, { recursive: true });
    await driver.networks?.ensure(id, EGRESS);
    // A server that binds its resolver on a port of its own points the existing routers at it.
    const previous = driver.networks?.resolver ?? { address: '', port: 0 };
    const router = (await readdir('/run/netns')).find((name) => name.includes(id) && name.endsWith('-r')) ?? '';
    const dnat = () => execFileSync('ip', ['netns', 'exec', router, 'nft', 'list', 'chain', 'inet', 'burrow', 'pre']);
    expect(dnat().toString()).toContain(`dnat ip to ${previous.address}:${previous.port}`);
    await driver.networks?.useResolver({ address: previous.address, port: 40_999 });
    expect(dnat().toString()).toContain(`dnat ip to ${previous.address}:40999`);
    expect(execFileSync('nft', ['list', 'set', 'inet', 'burrow_host', 'resolvers']).toString()).toContain(
      'udp . 40999',
    );
    await driver.networks?.forgetResolver({ address: previous.address, port: 40_999 });
    expect(execFileSync('nft', ['list', 'set', 'inet', 'burrow_host', 'resolvers']).toString()).not.toContain(
      'udp . 40999',
    );
    await driver.networks?.useResolver(previous);
    await rm(driver.paths(id).dir, { recursive: true, force: true });
    const found = await driver.listHostResources();
    expect(found.kinds?.[id]).toEqual(['network']);
    await driver.delete(id);
    expect(await driver.networks?.remaining(id)).toEqual([]);
    expect((await driver.listHostResources()).sandboxIds).not.toContain(id);
  });
});
