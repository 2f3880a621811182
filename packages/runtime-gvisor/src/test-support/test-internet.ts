import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { runCommand } from '../run-command.js';
import type { DnsQueryRecord } from './authoritative-dns.js';
import { makeTestCertificates, type TestCertificates } from './test-certificates.js';
import type { TestInternetServersConfig } from './test-internet-servers.js';
import { buildTestWheel, type TestWheel } from './test-wheel.js';

/**
 * A test "internet": a network namespace reached from the host over a veth, on a /28 of the benchmark range
 * 198.18.0.0/15 (public for Burrow's policy, never routed off this machine), running an HTTP server (port 80), an
 * HTTPS server (443; its certificate names every record's name, `*.test`, `test` and every address, signed by a CA
 * made for the run), an authoritative DNS server for `*.test` (port 53, UDP and TCP, logging every query) and a
 * PEP 503 simple index serving a wheel it builds itself. Every network test builds its own; nothing leaves the
 * machine.
 */
export interface TestInternet {
  /** Network namespace name (`btinet-<pid>-<hex>`). */
  namespace: string;
  /** The host's end of the veth. */
  hostAddress: string;
  /** The namespace's addresses, each a "public host"; the servers answer on `addresses[0]` (HTTP on all). */
  addresses: string[];
  /** The CIDR of the whole link, `198.18.x.y/28`. */
  cidr: string;
  /** The authoritative DNS server. */
  dns: { address: string; port: number };
  /** `http://<addresses[0]>`. */
  httpUrl: string;
  /** `https://<addresses[0]>` (the certificate names every address and every record's name). */
  httpsUrl: string;
  /** The run's CA: clients trust `tls.caCertPath` (or `tls.caCertPem`) to reach the HTTPS server. */
  tls: TestCertificates;
  /** The PEP 503 index, `http://<addresses[0]>/simple/`. */
  indexUrl: string;
  /** The wheel the index serves (also on the host, at `wheel.path`). */
  wheel: TestWheel;
  /** Every DNS query received so far, in order (after every query sent before this call was logged). */
  dnsQueries(): Promise<DnsQueryRecord[]>;
  /** Every HTTP request received so far, in order. */
  httpRequests(): Promise<TestHttpRequest[]>;
  /** Stop the servers, remove the namespace (and with it the veth) and the wheel. Idempotent. */
  close(): Promise<void>;
}

/** One HTTP request the test internet received. */
export interface TestHttpRequest {
  scheme: 'http' | 'https';
  method: string;
  path: string;
  /** Client address as the server saw it. */
  from: string;
  host: string | undefined;
}

/** Options of {@link startTestInternet}. */
export interface TestInternetOptions {
  /**
   * A records of the `test` zone, by name. `@default` (the string) stands for `addresses[0]`, `@1` for
   * `addresses[1]` and so on. @default `{ 'www.test': ['@default'], 'pypi.test': ['@default'] }`
   */
  records?: Record<string, string[]>;
  /** How many namespace addresses ("public hosts"), 1–13. @default 3 */
  addressCount?: number;
  /** TTL of DNS answers in seconds. @default 60 */
  ttlSeconds?: number;
  /** Remove leftovers of crashed runs first ({@link sweepTestInternets}). @default true */
  sweep?: boolean;
}

/** Name prefix of every test internet namespace. */
export const TEST_INTERNET_PREFIX = 'btinet-';
const READY_TIMEOUT_MS = 30_000;

/**
 * Build a test internet (needs root and `ip`).
 * @returns the running test internet; call `close()` in a `finally`/`afterAll`
 * @throws Error when a step of the set-up fails (whatever it made is removed first)
 * @example
 * const internet = await startTestInternet();
 * try { await fetch(internet.httpUrl); } finally { await internet.close(); }
 */
export async function startTestInternet(options: TestInternetOptions = {}): Promise<TestInternet> {
  if (options.sweep ?? true) await sweepTestInternets();
  const addressCount = options.addressCount ?? 3;
  if (addressCount < 1 || addressCount > 13) throw new RangeError('addressCount must be 1-13');
  const suffix = randomBytes(3).toString('hex');
  const namespace = `${TEST_INTERNET_PREFIX}${process.pid}-${suffix}`;
  const hostLink = `bti${suffix}h`;
  const nsLink = `bti${suffix}n`;
  const base = await freeSubnet();
  const hostAddress = numberToIpv4(base + 1);
  const addresses = Array.from({ length: addressCount }, (_, i) => numberToIpv4(base + 2 + i));
  const cidr = `${numberToIpv4(base)}/28`;
  let filesDir: string | undefined;
  let child: ChildProcess | undefined;
  const teardown = async (): Promise<void> => {
    if (child?.pid !== undefined && child.exitCode === null && child.signalCode === null) {
      const running = child;
      // Reaped before close() returns: a killed child that is not yet waited for still answers kill(pid, 0).
      const exited = new Promise((resolve) => running.once('exit', resolve));
      running.stdin?.end();
      running.kill('SIGKILL');
      await exited;
    }
    await removeNamespace(namespace);
    if (filesDir) await rm(filesDir, { recursive: true, force: true });
  };
  try {
    await ip(['netns', 'add', namespace]);
    await ip(['link', 'add', hostLink, 'type', 'veth', 'peer', 'name', nsLink, 'netns', namespace]);
    await ip(['addr', 'add', `${hostAddress}/28`, 'dev', hostLink]);
    await ip(['link', 'set', hostLink, 'up']);
    for (const address of addresses) await ip(['-n', namespace, 'addr', 'add', `${address}/28`, 'dev', nsLink]);
    await ip(['-n', namespace, 'link', 'set', 'lo', 'up']);
    await ip(['-n', namespace, 'link', 'set', nsLink, 'up']);
    await ip(['-n', namespace, 'route', 'add', 'default', 'via', hostAddress]);
    filesDir = await mkdtemp(join(tmpdir(), 'burrow-test-internet-'));
    const wheel = await buildTestWheel({ dir: filesDir });
    const records = resolveRecords(
      options.records ?? { 'www.test': ['@default'], 'pypi.test': ['@default'] },
      addresses,
    );
    // Every record's name itself: OpenSSL matches no wildcard directly below a top-level domain (`*.test`).
    const names = ['test', '*.test', ...Object.keys(records)];
    const tls = await makeTestCertificates({ dir: filesDir, names, addresses });
    const config: TestInternetServersConfig = {
      dnsAddress: addresses[0] ?? '',
      records,
      ttlSeconds: options.ttlSeconds ?? 60,
      filesDir,
      tls: { certPath: tls.serverCertPath, keyPath: tls.serverKeyPath },
      wheels: [{ name: wheel.name, fileName: wheel.fileName, sha256: wheel.sha256 }],
    };
    child = spawn('ip', ['netns', 'exec', namespace, process.execPath, ...serversCommand(), JSON.stringify(config)], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const events = new EventLog(child);
    const ready = await events.waitFor((event) => event.event === 'ready', READY_TIMEOUT_MS);
    const dnsAddress = addresses[0] ?? '';
    return {
      namespace,
      hostAddress,
      addresses,
      cidr,
      dns: { address: dnsAddress, port: Number(ready.dnsPort) },
      httpUrl: `http://${dnsAddress}`,
      httpsUrl: `https://${dnsAddress}`,
      tls,
      indexUrl: `http://${dnsAddress}/simple/`,
      wheel,
      dnsQueries: async () => (await events.flushed('dns')) as unknown as DnsQueryRecord[],
      httpRequests: async () => (await events.flushed('http')) as unknown as TestHttpRequest[],
      close: teardown,
    };
  } catch (error) {
    await teardown();
    throw error;
  }
}

/**
 * Remove test internets left by crashed runs: every namespace named with {@link TEST_INTERNET_PREFIX} whose owner
 * (the pid in its name) is dead, or that is older than `olderThanMs`. Their processes are killed first (a process
 * inside keeps a namespace and its veth alive after `ip netns delete`). A live run's young namespaces are kept.
 * @returns the names removed
 */
export async function sweepTestInternets(options: { olderThanMs?: number } = {}): Promise<string[]> {
  const olderThanMs = options.olderThanMs ?? 30 * 60_000;
  const listed = await runCommand('ip', ['netns', 'list']);
  const removed: string[] = [];
  for (const line of listed.stdout.split('\n')) {
    const name = line.split(' ')[0] ?? '';
    const match = /^btinet-([0-9]+)-[0-9a-f]{6}$/.exec(name);
    if (!match) continue;
    const ownerAlive = processAlive(Number(match[1]));
    const ageMs = await stat(`/run/netns/${name}`).then(
      (s) => Date.now() - s.mtimeMs,
      () => Number.POSITIVE_INFINITY,
    );
    if (ownerAlive && ageMs < olderThanMs) continue;
    await removeNamespace(name);
    removed.push(name);
  }
  return removed;
}

async function removeNamespace(namespace: string): Promise<void> {
  const pids = await runCommand('ip', ['netns', 'pids', namespace]);
  for (const pid of pids.stdout.split('\n').filter((p) => /^[0-9]+$/.test(p))) {
    try {
      process.kill(Number(pid), 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
  const result = await runCommand('ip', ['netns', 'delete', namespace]);
  if (result.exitCode !== 0 && !/No such file/.test(result.stderr)) {
    throw new Error(`ip netns delete ${namespace}: ${result.stderr.trim()}`);
  }
}

/** Node arguments that run the servers module next to this one (TypeScript sources go through tsx). */
function serversCommand(): string[] {
  const self = fileURLToPath(import.meta.url);
  if (self.endsWith('.ts')) {
    const tsx = createRequire(import.meta.url).resolve('tsx/package.json');
    return [
      '--import',
      join(tsx, '..', 'dist', 'loader.mjs'),
      self.replace(/test-internet\.ts$/, 'test-internet-servers.ts'),
    ];
  }
  return [self.replace(/test-internet\.js$/, 'test-internet-servers.js')];
}

function resolveRecords(records: Record<string, string[]>, addresses: string[]): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [name, values] of Object.entries(records)) {
    out[name.toLowerCase().replace(/\.$/, '')] = values.map((value) => {
      if (value === '@default') return addresses[0] ?? '';
      const index = /^@([0-9]+)$/.exec(value);
      if (!index) return value;
      const address = addresses[Number(index[1])];
      if (address === undefined) throw new RangeError(`record ${name}: no address ${value}`);
      return address;
    });
  }
  return out;
}

/** A /28 of 198.18.0.0/15 that no host interface uses, as the number of its network address. */
async function freeSubnet(): Promise<number> {
  const shown = await runCommand('ip', ['-4', '-o', 'addr', 'show']);
  const used = [...shown.stdout.matchAll(/inet (198\.1[89]\.[0-9]+\.[0-9]+)\//g)].map((m) => ipv4ToNumber(m[1] ?? ''));
  for (let attempt = 0; attempt < 100; attempt++) {
    const base = 0xc6120000 + randomInt(0, 8192) * 16;
    if (!used.some((address) => address >= base && address < base + 16)) return base;
  }
  throw new Error('no free /28 in 198.18.0.0/15');
}

async function ip(args: string[]): Promise<void> {
  const result = await runCommand('ip', args);
  if (result.exitCode !== 0) throw new Error(`ip ${args.join(' ')}: ${result.stderr.trim()}`);
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function ipv4ToNumber(address: string): number {
  return address.split('.').reduce((acc, part) => acc * 256 + Number(part), 0);
}

function numberToIpv4(value: number): string {
  return [value >>> 24, (value >>> 16) & 255, (value >>> 8) & 255, value & 255].join('.');
}

type ServerEvent = Record<string, unknown> & { event: string };

/** The child's stdout events, kept in order, with a ping/pong barrier for "everything up to now". */
class EventLog {
  private readonly events: ServerEvent[] = [];
  private readonly waiters = new Set<() => void>();
  private nextPing = 1;
  private stderr = '';
  private exited = false;

  constructor(private readonly child: ChildProcess) {
    if (!child.stdout || !child.stderr) throw new Error('test internet servers: no stdio pipes');
    createInterface({ input: child.stdout }).on('line', (line) => {
      try {
        this.events.push(JSON.parse(line) as ServerEvent);
      } catch {
        this.stderr += `${line}\n`;
      }
      for (const wake of this.waiters) wake();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      this.stderr = (this.stderr + chunk.toString()).slice(-4000);
    });
    child.on('exit', () => {
      this.exited = true;
      for (const wake of this.waiters) wake();
    });
  }

  async waitFor(predicate: (event: ServerEvent) => boolean, timeoutMs: number): Promise<ServerEvent> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.events.find(predicate);
      if (found) return found;
      if (this.exited) throw new Error(`test internet servers exited: ${this.stderr.trim()}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`test internet servers: no answer in ${timeoutMs} ms: ${this.stderr.trim()}`);
      await new Promise<void>((resolve) => {
        const wake = (): void => {
          this.waiters.delete(wake);
          clearTimeout(timer);
          resolve();
        };
        const timer = setTimeout(wake, left);
        this.waiters.add(wake);
      });
    }
  }

  /** The events of `kind`, after the child has written every event that precedes this call. */
  async flushed(kind: string): Promise<Array<Record<string, unknown>>> {
    const id = this.nextPing++;
    this.child.stdin?.write(`${JSON.stringify({ type: 'ping', id })}\n`);
    await this.waitFor((event) => event.event === 'pong' && event.id === id, 10_000);
    return this.events.filter((e) => e.event === kind).map(({ event: _event, ...rest }) => rest);
  }
}
