import { randomInt } from 'node:crypto';
import dgram from 'node:dgram';
import net from 'node:net';
import dnsPacket from 'dns-packet';
import type { DnsUpstream } from './dns-upstreams.js';

/** Options of {@link askUpstreams}. */
export interface UpstreamExchangeOptions {
  upstreams: readonly DnsUpstream[];
  /** Wait for one answer from one upstream, per attempt (UDP or TCP). */
  timeoutMs: number;
  /** Rounds over the whole list. */
  rounds: number;
  /** Sockets in use, so the resolver's close() can end them. */
  open: Set<{ destroy(): void }>;
}

/** The largest answer the resolver asks upstreams for over UDP (the DNS flag day 2020 figure). */
export const UPSTREAM_UDP_BYTES = 1232;

/**
 * Ask the upstreams for one name and type: a fresh query of the resolver's own (random id, a new socket and so a
 * new source port per attempt, recursion desired, EDNS with {@link UPSTREAM_UDP_BYTES}), nothing of the client's
 * packet but the name and type. Each upstream is tried in order, the list `rounds` times; an answer with the TC bit
 * is asked again over TCP of the same upstream. An answer counts only when it comes from the upstream asked (a
 * connected socket), carries the query's id and echoes its question.
 * @returns the decoded answer, or null when no upstream answered in time
 */
export async function askUpstreams(
  name: string,
  type: dnsPacket.RecordType,
  options: UpstreamExchangeOptions,
): Promise<dnsPacket.DecodedPacket | null> {
  for (let round = 0; round < options.rounds; round++) {
    for (const upstream of options.upstreams) {
      const id = randomInt(0, 65_536);
      const query = dnsPacket.encode({
        type: 'query',
        id,
        flags: dnsPacket.RECURSION_DESIRED,
        questions: [{ type, name, class: 'IN' }],
        additionals: [
          {
            type: 'OPT',
            name: '.',
            udpPayloadSize: UPSTREAM_UDP_BYTES,
            extendedRcode: 0,
            ednsVersion: 0,
            flags: 0,
            flag_do: false,
            options: [],
          },
        ],
      });
      const matches = (answer: dnsPacket.DecodedPacket): boolean => {
        const question = answer.questions?.[0];
        return (
          answer.id === id &&
          answer.type === 'response' &&
          question !== undefined &&
          question.type === type &&
          question.name.toLowerCase().replace(/\.$/, '') === name
        );
      };
      const udp = await udpExchange(upstream, query, matches, options);
      if (udp === null) continue;
      if (!udp.flag_tc) return udp;
      const tcp = await tcpExchange(upstream, query, matches, options);
      if (tcp !== null) return tcp;
    }
  }
  return null;
}

function decodeOrNull(bytes: Buffer): dnsPacket.DecodedPacket | null {
  try {
    return dnsPacket.decode(bytes);
  } catch {
    return null;
  }
}

function udpExchange(
  upstream: DnsUpstream,
  query: Buffer,
  matches: (answer: dnsPacket.DecodedPacket) => boolean,
  options: UpstreamExchangeOptions,
): Promise<dnsPacket.DecodedPacket | null> {
  return new Promise((resolve) => {
    const socket = dgram.createSocket(net.isIPv6(upstream.address) ? 'udp6' : 'udp4');
    const handle = { destroy: () => finish(null) };
    let done = false;
    const timer = setTimeout(() => finish(null), options.timeoutMs);
    function finish(value: dnsPacket.DecodedPacket | null): void {
      if (done) return;
      done = true;
      clearTimeout(timer);
      options.open.delete(handle);
      socket.close();
      resolve(value);
    }
    options.open.add(handle);
    // An ICMP port unreachable answers a connected socket with an error: the next upstream at once.
    socket.on('error', () => finish(null));
    socket.on('message', (message) => {
      const answer = decodeOrNull(message);
      if (answer !== null && matches(answer)) finish(answer);
    });
    socket.connect(upstream.port, upstream.address, () => {
      socket.send(query, (error) => {
        if (error) finish(null);
      });
    });
  });
}

function tcpExchange(
  upstream: DnsUpstream,
  query: Buffer,
  matches: (answer: dnsPacket.DecodedPacket) => boolean,
  options: UpstreamExchangeOptions,
): Promise<dnsPacket.DecodedPacket | null> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: upstream.address, port: upstream.port });
    const handle = { destroy: () => finish(null) };
    let done = false;
    let buffered = Buffer.alloc(0);
    const timer = setTimeout(() => finish(null), options.timeoutMs);
    function finish(value: dnsPacket.DecodedPacket | null): void {
      if (done) return;
      done = true;
      clearTimeout(timer);
      options.open.delete(handle);
      socket.destroy();
      resolve(value);
    }
    options.open.add(handle);
    socket.on('error', () => finish(null));
    socket.on('end', () => finish(null));
    socket.on('connect', () => {
      const frame = Buffer.alloc(2);
      frame.writeUInt16BE(query.length);
      socket.write(Buffer.concat([frame, query]));
    });
    socket.on('data', (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      if (buffered.length < 2) return;
      const length = buffered.readUInt16BE(0);
      if (buffered.length < 2 + length) return;
      const answer = decodeOrNull(buffered.subarray(2, 2 + length));
      finish(answer !== null && matches(answer) ? answer : null);
    });
  });
}
