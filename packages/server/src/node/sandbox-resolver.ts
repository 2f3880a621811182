import dgram from 'node:dgram';
import net from 'node:net';
import {
  type CompiledNetworkPolicy,
  compileNetworkPolicy,
  nameAllowed,
  normalizeDnsName,
} from '@burrow/contract/network-rules';
import dnsPacket from 'dns-packet';
import type { Logger } from 'pino';
import { askUpstreams } from './dns-upstream-exchange.js';
import type { DnsUpstream } from './dns-upstreams.js';

/** The part of a sandbox's network policy the resolver needs (entries as in the contract's `allowOut`/`denyOut`). */
export interface SandboxDnsPolicy {
  sandboxId: string;
  mode: 'egress' | 'none';
  allowOut: readonly string[];
  denyOut: readonly string[];
}

/** Options of {@link startSandboxResolver}. */
export interface SandboxResolverOptions {
  /** Host address to listen on (UDP), IPv4 or IPv6. */
  listenAddress: string;
  /** UDP port; 0 picks a free one (see the returned `port`). */
  port: number;
  /** Servers allowed queries are forwarded to, asked in order (see `hostDnsUpstreams`, `parseDnsUpstreams`). */
  upstreams: readonly DnsUpstream[];
  /**
   * The sandbox and policy behind a query's source address, or undefined for an address that is no sandbox's
   * (answered REFUSED). Called for every query; may be async.
   */
  policyFor(sourceAddress: string): SandboxDnsPolicy | undefined | Promise<SandboxDnsPolicy | undefined>;
  /**
   * Called with the IPv4 addresses of every A answer before the answer is sent, so the firewall lets the sandbox
   * connect to them when its client does. `ttlSeconds` is the answer's lowest TTL, at least
   * `minAllowTtlSeconds`. A throw (or rejection) answers SERVFAIL instead: no address the firewall does not hold is
   * handed out. `name` is the question's name, normalized.
   */
  onResolved(sandboxId: string, addresses: string[], ttlSeconds: number, name: string): Promise<void> | void;
  logger: Logger;
  /** Wait for one upstream answer, per attempt. @default 2000 (2 s) */
  upstreamTimeoutMs?: number;
  /** Rounds over the upstream list before SERVFAIL. @default 2 */
  upstreamRounds?: number;
  /**
   * Least TTL passed to `onResolved`, in seconds: clients keep answers for a while whatever the TTL (a TTL of 0
   * would close the firewall before the client connects). @default 30
   */
  minAllowTtlSeconds?: number;
  /** Queries of one sandbox in flight at once; more answer SERVFAIL. @default 64 */
  maxInFlightPerSandbox?: number;
}

/** A running sandbox resolver. */
export interface SandboxResolver {
  /** The address it listens on. */
  address: string;
  /** The UDP port it listens on (the one picked when `port` was 0). */
  port: number;
  /** Stop answering and end the upstream exchanges in flight. Idempotent. */
  close(): Promise<void>;
}

const RCODE = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3, NOTIMP: 4, REFUSED: 5 } as const;
type Rcode = (typeof RCODE)[keyof typeof RCODE];
const HEADER_BYTES = 12;
const CLASSIC_UDP_BYTES = 512;
/** Largest UDP answer sent to a sandbox, whatever EDNS size it offers. */
const MAX_ANSWER_BYTES = 1232;
/** Record types answered from upstream. A, AAAA and ANY have their own rules. */
const ADDRESS_TYPES = new Set(['A', 'AAAA']);

/**
 * Start the DNS resolver Burrow runs for its sandboxes (UDP only: DNS over TCP from a sandbox is not offered, so an
 * answer that does not fit is cut to the records that fit, without the TC bit).
 *
 * Per query, in order: a packet shorter than a header or with the QR bit is dropped; a source `policyFor` does
 * not know is REFUSED; an opcode other than QUERY is NOTIMP; a packet that does not decode, has other than one
 * question or a name past 255 bytes is FORMERR; class other than IN and type ANY are REFUSED. A name the sandbox's
 * policy does not allow (`nameAllowed` in `@burrow/contract/network-rules`, also a name that is no valid host name)
 * is NXDOMAIN and no packet leaves the host for it. AAAA is answered empty (NOERROR, no records) without asking
 * upstream: sandboxes have no IPv6 route. Any other type is asked upstream as a fresh query of the resolver's own
 * (`askUpstreams`); an A answer's CNAME and A records are returned and its addresses passed to `onResolved` first;
 * other types return their records less any A/AAAA. An upstream failure is SERVFAIL; an upstream NXDOMAIN passes.
 * @returns the resolver, listening
 * @throws Error when the address cannot be bound
 * @example
 * const resolver = await startSandboxResolver({
 *   listenAddress: '10.200.0.1', port: 0, upstreams: hostDnsUpstreams(await readFile('/etc/resolv.conf', 'utf8')),
 *   policyFor: (ip) => policies.get(ip), onResolved: (id, ips, ttl) => net.allowResolvedAddresses(id, ips, ttl), logger,
 * });
 */
export async function startSandboxResolver(options: SandboxResolverOptions): Promise<SandboxResolver> {
  const logger = options.logger.child({ component: 'sandbox-resolver' });
  const socket = dgram.createSocket(net.isIPv6(options.listenAddress) ? 'udp6' : 'udp4');
  const openUpstream = new Set<{ destroy(): void }>();
  const inFlight = new Map<string, number>();
  const compiled = new WeakMap<SandboxDnsPolicy, CompiledNetworkPolicy | null>();
  const maxInFlight = options.maxInFlightPerSandbox ?? 64;
  const strangersWarnedAt = new Map<string, number>();
  let closed = false;

  const compile = (policy: SandboxDnsPolicy): CompiledNetworkPolicy | null => {
    const known = compiled.get(policy);
    if (known !== undefined) return known;
    const result = compileNetworkPolicy(policy);
    if (!result.ok) logger.error({ sandboxId: policy.sandboxId, problems: result.messages }, 'invalid network policy');
    const value = result.ok ? result.policy : null;
    compiled.set(policy, value);
    return value;
  };

  const answer = async (message: Buffer, source: string): Promise<Buffer | null> => {
    if (message.length < HEADER_BYTES || (message.readUInt16BE(2) & 0x8000) !== 0) return null;
    const policy = await options.policyFor(source);
    if (policy === undefined) {
      // Once a minute per source at most: a flood of strangers' queries must not flood the log.
      const now = Date.now();
      if (now - (strangersWarnedAt.get(source) ?? 0) > 60_000) {
        if (strangersWarnedAt.size > 1000) strangersWarnedAt.clear();
        strangersWarnedAt.set(source, now);
        logger.warn({ source }, 'DNS query from an address that is no sandbox');
      }
      return headerOnly(message, RCODE.REFUSED);
    }
    if (((message.readUInt16BE(2) >> 11) & 0xf) !== 0) return headerOnly(message, RCODE.NOTIMP);
    let query: dnsPacket.DecodedPacket;
    try {
      query = dnsPacket.decode(message);
    } catch {
      return headerOnly(message, RCODE.FORMERR);
    }
    const question = query.questions?.[0];
    if (question === undefined || query.questions?.length !== 1) return headerOnly(message, RCODE.FORMERR);
    const reply = (rcode: Rcode, answers: dnsPacket.Answer[] = []) => encodeReply(query, rcode, answers);
    if ((question.class ?? 'IN') !== 'IN' || question.type === ('ANY' as string)) return reply(RCODE.REFUSED);
    const rules = compile(policy);
    if (rules === null) return reply(RCODE.SERVFAIL);
    const name = normalizeDnsName(question.name);
    if (name === null || !nameAllowed(rules, name)) {
      logger.debug({ sandboxId: policy.sandboxId, name: question.name, type: question.type }, 'DNS name denied');
      return reply(RCODE.NXDOMAIN);
    }
    if (question.type === 'AAAA') return reply(RCODE.NOERROR);
    const count = inFlight.get(policy.sandboxId) ?? 0;
    if (count >= maxInFlight) return reply(RCODE.SERVFAIL);
    inFlight.set(policy.sandboxId, count + 1);
    try {
      const upstream = await askUpstreams(name, question.type, {
        upstreams: options.upstreams,
        timeoutMs: options.upstreamTimeoutMs ?? 2000,
        rounds: options.upstreamRounds ?? 2,
        open: openUpstream,
      });
      if (upstream === null) {
        logger.warn({ sandboxId: policy.sandboxId, name, type: question.type }, 'no DNS upstream answered');
        return reply(RCODE.SERVFAIL);
      }
      const rcode = rcodeOf(upstream);
      if (rcode !== RCODE.NOERROR) return reply(rcode === RCODE.NXDOMAIN ? RCODE.NXDOMAIN : RCODE.SERVFAIL);
      const records = (upstream.answers ?? []).filter((record) =>
        question.type === 'A' ? record.type === 'A' || record.type === 'CNAME' : !ADDRESS_TYPES.has(record.type),
      );
      const fitted = fitAnswers(query, records);
      const addresses = fitted.flatMap((record) => (record.type === 'A' ? [record.data] : []));
      if (addresses.length > 0) {
        const ttls = fitted.map((record) => ('ttl' in record && record.ttl !== undefined ? record.ttl : 0));
        const ttlSeconds = Math.max(Math.min(...ttls), options.minAllowTtlSeconds ?? 30);
        try {
          await options.onResolved(policy.sandboxId, addresses, ttlSeconds, name);
        } catch (error) {
          logger.error({ sandboxId: policy.sandboxId, name, err: error }, 'resolved addresses not allowed');
          return reply(RCODE.SERVFAIL);
        }
      }
      return reply(RCODE.NOERROR, fitted);
    } finally {
      const left = (inFlight.get(policy.sandboxId) ?? 1) - 1;
      if (left === 0) inFlight.delete(policy.sandboxId);
      else inFlight.set(policy.sandboxId, left);
    }
  };

  socket.on('message', (message, remote) => {
    answer(message, remote.address).then(
      (bytes) => {
        if (bytes !== null && !closed) socket.send(bytes, remote.port, remote.address);
      },
      (error: unknown) => logger.error({ err: error, source: remote.address }, 'DNS query failed'),
    );
  });
  socket.on('error', (error) => logger.error({ err: error }, 'sandbox resolver socket error'));
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.bind(options.port, options.listenAddress, () => {
      socket.off('error', reject);
      resolve();
    });
  });
  const bound = socket.address();
  logger.info({ address: bound.address, port: bound.port, upstreams: options.upstreams }, 'sandbox resolver listening');
  return {
    address: bound.address,
    port: bound.port,
    close: async () => {
      if (closed) return;
      closed = true;
      for (const handle of [...openUpstream]) handle.destroy();
      await new Promise<void>((resolve) => socket.close(() => resolve()));
    },
  };
}

/** A reply of just the header: the query's id, opcode and RD bit, the rcode, no sections. */
function headerOnly(message: Buffer, rcode: Rcode): Buffer {
  const header = Buffer.alloc(HEADER_BYTES);
  header.writeUInt16BE(message.readUInt16BE(0), 0);
  const flags = message.readUInt16BE(2);
  header.writeUInt16BE(0x8000 | (flags & 0x7900) | 0x0080 | rcode, 2);
  return header;
}

function rcodeOf(packet: dnsPacket.DecodedPacket): number {
  return (packet.flags ?? 0) & 0xf;
}

/** The client's UDP limit: its EDNS size (at least 512, at most {@link MAX_ANSWER_BYTES}), else 512. */
function clientLimit(query: dnsPacket.DecodedPacket): number {
  const opt = query.additionals?.find((record) => record.type === 'OPT');
  if (opt === undefined || !('udpPayloadSize' in opt)) return CLASSIC_UDP_BYTES;
  return Math.min(Math.max(opt.udpPayloadSize, CLASSIC_UDP_BYTES), MAX_ANSWER_BYTES);
}

function encodeReply(query: dnsPacket.DecodedPacket, rcode: Rcode, answers: dnsPacket.Answer[]): Buffer {
  return dnsPacket.encode(replyPacket(query, rcode, answers));
}

function replyPacket(query: dnsPacket.DecodedPacket, rcode: Rcode, answers: dnsPacket.Answer[]): dnsPacket.Packet {
  const hasOpt = query.additionals?.some((record) => record.type === 'OPT') ?? false;
  return {
    type: 'response',
    id: query.id ?? 0,
    flags: ((query.flags ?? 0) & dnsPacket.RECURSION_DESIRED) | dnsPacket.RECURSION_AVAILABLE | rcode,
    questions: query.questions ?? [],
    answers,
    ...(hasOpt
      ? {
          additionals: [
            {
              type: 'OPT',
              name: '.',
              udpPayloadSize: MAX_ANSWER_BYTES,
              extendedRcode: 0,
              ednsVersion: 0,
              flags: 0,
              flag_do: false,
              options: [],
            },
          ],
        }
      : {}),
  };
}

/** The leading records that fit the client's limit (CNAMEs come first in upstream answers, so the chain stays). */
function fitAnswers(query: dnsPacket.DecodedPacket, records: dnsPacket.Answer[]): dnsPacket.Answer[] {
  const limit = clientLimit(query);
  let fitted = records;
  while (fitted.length > 0 && dnsPacket.encodingLength(replyPacket(query, RCODE.NOERROR, fitted)) > limit) {
    fitted = fitted.slice(0, -1);
  }
  return fitted;
}
