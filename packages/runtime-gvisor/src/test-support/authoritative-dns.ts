import dgram from 'node:dgram';
import net from 'node:net';
import dnsPacket from 'dns-packet';

/** One query the authoritative test server received. */
export interface DnsQueryRecord {
  /** The queried name as received, lower-cased, without a trailing dot. */
  name: string;
  /** Record type, for example `A`. */
  type: string;
  transport: 'udp' | 'tcp';
  /** Sender address. */
  from: string;
}

/** Options of {@link startAuthoritativeDns}. */
export interface AuthoritativeDnsOptions {
  /** Address to listen on (UDP and TCP). */
  address: string;
  /** Port. @default 53 */
  port?: number;
  /** Zone served: names at or below it are answered, others REFUSED. @default 'test' */
  zone?: string;
  /**
   * A records by name (lower case, no trailing dot); a name whose first value is no IPv4 address is a CNAME to that
   * name (answered with the target's A records when the target is listed). A name of the zone not listed answers
   * NXDOMAIN.
   */
  records: Readonly<Record<string, readonly string[]>>;
  /** TTL of every answer in seconds. @default 60 */
  ttlSeconds?: number;
  /** Called for every query received, decodable or not, before the answer is sent. */
  onQuery: (query: DnsQueryRecord) => void;
}

/** A running authoritative test DNS server. */
export interface AuthoritativeDns {
  address: string;
  port: number;
  close(): Promise<void>;
}

const CLASSIC_UDP_BYTES = 512;

/**
 * An authoritative DNS server for a test zone, over UDP and TCP, built on dns-packet. Answers A records of
 * `records` with the AA bit, AAAA and other types of a listed name with an empty answer, unlisted names of the zone
 * NXDOMAIN and names outside it REFUSED. A UDP answer larger than the client's limit (512 bytes, or its EDNS size)
 * is sent with the TC bit and no answers, so clients retry over TCP. Test infrastructure, not a production server.
 * @returns the server, listening
 */
export async function startAuthoritativeDns(options: AuthoritativeDnsOptions): Promise<AuthoritativeDns> {
  const zone = (options.zone ?? 'test').toLowerCase();
  const ttl = options.ttlSeconds ?? 60;
  /** A records of `name`, after the CNAME chain its records start with (a value that is no IPv4 address). */
  const aRecords = (name: string, asked: string, depth = 0): dnsPacket.Answer[] => {
    const values = options.records[name] ?? [];
    const target = values[0];
    if (target !== undefined && !net.isIPv4(target) && depth < 8) {
      const cname: dnsPacket.Answer = { type: 'CNAME', name: asked, ttl, class: 'IN', data: target };
      return [cname, ...aRecords(target, target, depth + 1)];
    }
    return values.map((data) => ({ type: 'A', name: asked, ttl, class: 'IN', data }));
  };
  const answer = (query: Buffer, transport: 'udp' | 'tcp', from: string): Buffer | null => {
    let packet: dnsPacket.DecodedPacket;
    try {
      packet = dnsPacket.decode(query);
    } catch {
      options.onQuery({ name: '', type: 'MALFORMED', transport, from });
      return query.length >= 2 ? errorAnswer(query.readUInt16BE(0), 1) : null;
    }
    const question = packet.questions?.[0];
    if (packet.type !== 'query' || question === undefined) return null;
    const name = question.name.toLowerCase().replace(/\.$/, '');
    options.onQuery({ name, type: question.type, transport, from });
    const inZone = name === zone || name.endsWith(`.${zone}`);
    const addresses = options.records[name];
    const rcode = !inZone ? 5 : addresses === undefined && name !== zone ? 3 : 0;
    const answers: dnsPacket.Answer[] = rcode === 0 && question.type === 'A' ? aRecords(name, question.name) : [];
    const response: dnsPacket.Packet = {
      type: 'response',
      id: packet.id ?? 0,
      flags:
        (inZone ? dnsPacket.AUTHORITATIVE_ANSWER : 0) | ((packet.flags ?? 0) & dnsPacket.RECURSION_DESIRED) | rcode,
      questions: [question],
      answers,
    };
    const encoded = dnsPacket.encode(response);
    if (transport === 'udp') {
      const opt = packet.additionals?.find((record) => record.type === 'OPT');
      const limit =
        opt && 'udpPayloadSize' in opt ? Math.max(opt.udpPayloadSize, CLASSIC_UDP_BYTES) : CLASSIC_UDP_BYTES;
      if (encoded.length > limit) {
        return dnsPacket.encode({
          ...response,
          flags: (response.flags ?? 0) | dnsPacket.TRUNCATED_RESPONSE,
          answers: [],
        });
      }
    }
    return encoded;
  };

  const udp = dgram.createSocket('udp4');
  udp.on('message', (message, remote) => {
    const reply = answer(message, 'udp', remote.address);
    if (reply) udp.send(reply, remote.port, remote.address);
  });
  await new Promise<void>((resolve, reject) => {
    udp.once('error', reject);
    udp.bind(options.port ?? 53, options.address, () => resolve());
  });
  const port = udp.address().port;

  const tcp = net.createServer((socket) => {
    let buffered = Buffer.alloc(0);
    socket.on('error', () => socket.destroy());
    socket.on('data', (chunk) => {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= 2) {
        const length = buffered.readUInt16BE(0);
        if (buffered.length < 2 + length) return;
        const reply = answer(buffered.subarray(2, 2 + length), 'tcp', socket.remoteAddress ?? '');
        buffered = buffered.subarray(2 + length);
        if (reply) {
          const frame = Buffer.alloc(2);
          frame.writeUInt16BE(reply.length);
          socket.write(Buffer.concat([frame, reply]));
        }
      }
    });
  });
  await new Promise<void>((resolve, reject) => {
    tcp.once('error', reject);
    tcp.listen(port, options.address, () => resolve());
  });

  return {
    address: options.address,
    port,
    close: async () => {
      await new Promise<void>((resolve) => udp.close(() => resolve()));
      await new Promise<void>((resolve) => tcp.close(() => resolve()));
    },
  };
}

function errorAnswer(id: number, rcode: number): Buffer {
  const header = Buffer.alloc(12);
  header.writeUInt16BE(id, 0);
  header.writeUInt16BE(0x8000 | rcode, 2);
  return header;
}
