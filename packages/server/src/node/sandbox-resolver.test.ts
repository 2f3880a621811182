import dgram from 'node:dgram';
import { queryDns, startTestInternet, type TestInternet } from '@burrow/runtime-gvisor/test-support';
import dnsPacket from 'dns-packet';
import { pino } from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type SandboxDnsPolicy, type SandboxResolver, startSandboxResolver } from './sandbox-resolver.js';

/**
 * The sandbox resolver against a real authoritative server in a test internet (it logs every query it receives):
 * queries come from 127.0.0.1 (a known "sandbox") and 127.0.0.2 (no sandbox).
 */
describe('sandbox resolver', () => {
  let internet: TestInternet;
  let resolver: SandboxResolver;
  let policy: SandboxDnsPolicy;
  let resolved: Array<{ sandboxId: string; addresses: string[]; ttlSeconds: number; at: number }>;
  let onResolvedDelayMs = 0;
  let onResolvedFails = false;
  const many = Array.from({ length: 60 }, (_, i) => `198.18.255.${i + 1}`);

  const ask = (name: string, extra: Partial<Parameters<typeof queryDns>[0]> = {}) =>
    queryDns({ server: resolver.address, port: resolver.port, name, localAddress: '127.0.0.1', ...extra });
  let queriesBefore = 0;
  /** What the authoritative server received for `name` during the current test. */
  const upstreamSaw = async (name: string) =>
    (await internet.dnsQueries())
      .slice(queriesBefore)
      .filter((query) => query.name === name)
      .map((query) => `${query.transport} ${query.type}`);

  beforeAll(async () => {
    internet = await startTestInternet({
      records: {
        'www.test': ['@default'],
        'other.test': ['@1'],
        'many.test': many,
        'secret.evil.test': ['@2'],
        'alias.test': ['cdn.test'],
        'cdn.test': ['@1', '@2'],
      },
      ttlSeconds: 5,
    });
    resolver = await startSandboxResolver({
      listenAddress: '127.0.0.1',
      port: 0,
      // The first upstream has nothing on port 53 (ICMP port unreachable): the resolver moves on to the second.
      upstreams: [
        { address: internet.addresses[2] ?? '', port: 53 },
        { address: internet.dns.address, port: internet.dns.port },
      ],
      policyFor: (source) => (source === '127.0.0.1' ? policy : undefined),
      onResolved: async (sandboxId, addresses, ttlSeconds) => {
        await new Promise((resolve) => setTimeout(resolve, onResolvedDelayMs));
        if (onResolvedFails) throw new Error('firewall unavailable');
        resolved.push({ sandboxId, addresses, ttlSeconds, at: Date.now() });
      },
      logger: pino({ level: 'silent' }),
      upstreamTimeoutMs: 1500,
    });
  });
  afterAll(async () => {
    await resolver?.close();
    await internet?.close();
  });
  beforeEach(async () => {
    queriesBefore = (await internet.dnsQueries()).length;
    policy = { sandboxId: 'sbx_test', mode: 'egress', allowOut: [], denyOut: [] };
    resolved = [];
    onResolvedDelayMs = 0;
    onResolvedFails = false;
  });

  it('forwards an allowed name and calls onResolved with its addresses before the answer is sent', async () => {
    onResolvedDelayMs = 300;
    const answer = await ask('WWW.Test.');
    const answeredAt = Date.now();
    expect(answer?.rcode).toBe('NOERROR');
    expect(answer?.id).toBeDefined();
    expect(answer?.questions?.[0]?.name).toBe('WWW.Test');
    expect(answer?.answers?.map((record) => record.data)).toEqual([internet.addresses[0]]);
    expect(resolved).toEqual([
      { sandboxId: 'sbx_test', addresses: [internet.addresses[0]], ttlSeconds: 30, at: expect.any(Number) },
    ]);
    expect(resolved[0]?.at).toBeLessThanOrEqual(answeredAt);
    expect(await upstreamSaw('www.test')).toEqual(['udp A']);
  });

  it('returns the CNAME chain with the A records and passes the addresses to onResolved', async () => {
    const answer = await ask('alias.test');
    expect(answer?.answers?.map((record) => `${record.type} ${record.name} ${record.data}`)).toEqual([
      'CNAME alias.test cdn.test',
      `A cdn.test ${internet.addresses[1]}`,
      `A cdn.test ${internet.addresses[2]}`,
    ]);
    expect(resolved.map((entry) => entry.addresses)).toEqual([[internet.addresses[1], internet.addresses[2]]]);
    expect(await upstreamSaw('alias.test')).toEqual(['udp A']);
  });

  it('answers NXDOMAIN for a denied name and no query for it reaches the upstream', async () => {
    policy = { ...policy, denyOut: ['*.evil.test'] };
    const answer = await ask('secret.evil.test');
    expect(answer?.rcode).toBe('NXDOMAIN');
    expect(answer?.answers).toEqual([]);
    expect(await ask('secret.evil.test', { type: 'TXT' })).toMatchObject({ rcode: 'NXDOMAIN' });
    expect(await upstreamSaw('secret.evil.test')).toEqual([]);
    expect(resolved).toEqual([]);
    // The same name under a policy that allows it does reach the upstream: the test above can fail.
    policy = { ...policy, denyOut: [] };
    expect((await ask('secret.evil.test'))?.answers?.map((record) => record.data)).toEqual([internet.addresses[2]]);
    expect(await upstreamSaw('secret.evil.test')).toEqual(['udp A']);
  });

  it('is an allowlist of names with denyOut 0.0.0.0/0, allow winning over deny', async () => {
    policy = { ...policy, allowOut: ['www.test', '*.www.test'], denyOut: ['0.0.0.0/0', 'www.test'] };
    expect((await ask('www.test'))?.rcode).toBe('NOERROR');
    expect((await ask('other.test'))?.rcode).toBe('NXDOMAIN');
    expect((await ask('x.other.test'))?.rcode).toBe('NXDOMAIN');
    expect(await upstreamSaw('other.test')).toEqual([]);
    expect(await upstreamSaw('x.other.test')).toEqual([]);
  });

  it('resolves a name whose addresses a narrower denyOut CIDR covers (the firewall refuses the connection)', async () => {
    policy = { ...policy, denyOut: [`${internet.addresses[1]}/32`] };
    expect((await ask('other.test'))?.answers?.map((record) => record.data)).toEqual([internet.addresses[1]]);
  });

  it('refuses every name in mode none', async () => {
    policy = { ...policy, mode: 'none', allowOut: ['www.test'] };
    expect((await ask('www.test'))?.rcode).toBe('NXDOMAIN');
  });

  it('answers AAAA empty without asking upstream', async () => {
    const answer = await ask('other.test', { type: 'AAAA' });
    expect(answer?.rcode).toBe('NOERROR');
    expect(answer?.answers).toEqual([]);
    expect((await upstreamSaw('other.test')).filter((query) => query.endsWith('AAAA'))).toEqual([]);
  });

  it('passes an upstream NXDOMAIN and refuses ANY', async () => {
    expect((await ask('nothing.test'))?.rcode).toBe('NXDOMAIN');
    expect(await upstreamSaw('nothing.test')).toEqual(['udp A']);
    expect((await ask('www.test', { type: 'ANY' as dnsPacket.RecordType }))?.rcode).toBe('REFUSED');
  });

  it('asks over TCP when the upstream truncates, and cuts the answer to what fits the client', async () => {
    const classic = await ask('many.test');
    expect(classic?.rcode).toBe('NOERROR');
    expect(classic?.flag_tc).toBe(false);
    const count = classic?.answers?.length ?? 0;
    expect(count).toBeGreaterThan(10);
    expect(count).toBeLessThan(many.length);
    expect(resolved[0]?.addresses).toEqual(many.slice(0, count));
    // An EDNS client gets more, up to 1232 bytes whatever size it offers.
    const edns = await ask('many.test', { ednsUdpBytes: 4096 });
    expect(edns?.answers?.length).toBeGreaterThan(count);
    expect(dnsPacket.encodingLength(edns ?? {})).toBeLessThanOrEqual(1232);
    expect(await upstreamSaw('many.test')).toEqual(['udp A', 'tcp A', 'udp A', 'tcp A']);
  });

  it('refuses a query from an address that is no sandbox, without asking upstream', async () => {
    const answer = await ask('other.test', { localAddress: '127.0.0.2' });
    expect(answer?.rcode).toBe('REFUSED');
    expect(await upstreamSaw('other.test')).toEqual([]);
  });

  it('answers SERVFAIL when onResolved fails, so no address the firewall lacks is handed out', async () => {
    onResolvedFails = true;
    const answer = await ask('www.test');
    expect(answer?.rcode).toBe('SERVFAIL');
    expect(answer?.answers).toEqual([]);
  });

  it('answers FORMERR to malformed and overlong queries, drops what is no query, and keeps answering', async () => {
    const header = (id: number, flags: number, qdcount: number) => {
      const bytes = Buffer.alloc(12);
      bytes.writeUInt16BE(id, 0);
      bytes.writeUInt16BE(flags, 2);
      bytes.writeUInt16BE(qdcount, 4);
      return bytes;
    };
    const garbage = Buffer.concat([header(0x1234, 0x0100, 1), Buffer.from([0x3f, 0x41, 0x41])]);
    const formerr = await rawAsk(resolver, garbage);
    expect(formerr?.readUInt16BE(0)).toBe(0x1234);
    expect((formerr?.readUInt16BE(2) ?? 0) & 0x800f).toBe(0x8001);
    const label = Buffer.concat([Buffer.from([63]), Buffer.alloc(63, 0x61)]);
    const overlong = Buffer.concat([
      header(0x2345, 0x0100, 1),
      label,
      label,
      label,
      label,
      label,
      Buffer.from([0, 0, 1, 0, 1]),
    ]);
    expect(((await rawAsk(resolver, overlong))?.readUInt16BE(2) ?? 0) & 0x000f).toBe(1);
    const two = dnsPacket.encode({
      type: 'query',
      id: 7,
      questions: [
        { type: 'A', name: 'www.test' },
        { type: 'A', name: 'other.test' },
      ],
    });
    expect(((await rawAsk(resolver, two))?.readUInt16BE(2) ?? 0) & 0x000f).toBe(1);
    const notQuery = Buffer.concat([header(9, 0x2100, 0)]);
    expect(((await rawAsk(resolver, notQuery))?.readUInt16BE(2) ?? 0) & 0x000f).toBe(4);
    expect(await rawAsk(resolver, Buffer.from([1, 2, 3]), 500)).toBeNull();
    expect(await rawAsk(resolver, dnsPacket.encode({ type: 'response', id: 3, questions: [] }), 500)).toBeNull();
    expect((await ask('www.test'))?.rcode).toBe('NOERROR');
  });

  it('answers SERVFAIL when no upstream answers', async () => {
    const silent = await startSandboxResolver({
      listenAddress: '127.0.0.1',
      port: 0,
      upstreams: [{ address: internet.addresses[2] ?? '', port: 53 }],
      policyFor: () => policy,
      onResolved: () => undefined,
      logger: pino({ level: 'silent' }),
      upstreamTimeoutMs: 200,
    });
    try {
      const answer = await queryDns({ server: silent.address, port: silent.port, name: 'www.test' });
      expect(answer?.rcode).toBe('SERVFAIL');
    } finally {
      await silent.close();
    }
  });
});

/** Send raw bytes from 127.0.0.1 and return the raw answer, or null after `timeoutMs`. */
function rawAsk(resolver: SandboxResolver, bytes: Buffer, timeoutMs = 3000): Promise<Buffer | null> {
  return new Promise((resolve) => {
    const socket = dgram.createSocket('udp4');
    const timer = setTimeout(() => {
      socket.close();
      resolve(null);
    }, timeoutMs);
    socket.on('message', (message) => {
      clearTimeout(timer);
      socket.close();
      resolve(message);
    });
    socket.bind(0, '127.0.0.1', () => socket.send(bytes, resolver.port, resolver.address));
  });
}
