import dgram from 'node:dgram';
import net from 'node:net';
import dnsPacket from 'dns-packet';

/** Options of {@link queryDns}. */
export interface QueryDnsOptions {
  server: string;
  port: number;
  /** The name asked, or raw bytes sent as they are (malformed packets). */
  name?: string;
  /** Record type. @default 'A' */
  type?: dnsPacket.RecordType;
  raw?: Buffer;
  /** @default 'udp' */
  transport?: 'udp' | 'tcp';
  /** Local address to send from. @default any */
  localAddress?: string;
  /** EDNS UDP payload size to advertise. @default none (no OPT record) */
  ednsUdpBytes?: number;
  /** @default 3000 */
  timeoutMs?: number;
}

/** A decoded answer with its rcode. */
export type DnsAnswer = dnsPacket.DecodedPacket & { rcode: string };

/**
 * Send one DNS query and wait for its answer (a test client).
 * @returns the decoded answer, or null when none came within `timeoutMs`
 * @throws Error when the answer cannot be decoded
 */
export async function queryDns(options: QueryDnsOptions): Promise<DnsAnswer | null> {
  const id = Math.floor(Math.random() * 65_536);
  const query =
    options.raw ??
    dnsPacket.encode({
      type: 'query',
      id,
      flags: dnsPacket.RECURSION_DESIRED,
      questions: [{ type: options.type ?? 'A', name: options.name ?? '', class: 'IN' }],
      ...(options.ednsUdpBytes === undefined
        ? {}
        : {
            additionals: [
              {
                type: 'OPT',
                name: '.',
                udpPayloadSize: options.ednsUdpBytes,
                extendedRcode: 0,
                ednsVersion: 0,
                flags: 0,
                flag_do: false,
                options: [],
              },
            ],
          }),
    });
  const timeoutMs = options.timeoutMs ?? 3000;
  const bytes =
    options.transport === 'tcp'
      ? await tcpExchange(options, query, timeoutMs)
      : await udpExchange(options, query, timeoutMs);
  return bytes === null ? null : (dnsPacket.decode(bytes) as DnsAnswer);
}

function udpExchange(options: QueryDnsOptions, query: Buffer, timeoutMs: number): Promise<Buffer | null> {
  return new Promise((resolve, reject) => {
    const socket = dgram.createSocket('udp4');
    const timer = setTimeout(() => finish(null), timeoutMs);
    const finish = (value: Buffer | null, error?: Error): void => {
      clearTimeout(timer);
      socket.close();
      if (error) reject(error);
      else resolve(value);
    };
    socket.on('error', (error) => finish(null, error));
    socket.on('message', (message) => finish(message));
    socket.bind(0, options.localAddress, () => socket.send(query, options.port, options.server));
  });
}

function tcpExchange(options: QueryDnsOptions, query: Buffer, timeoutMs: number): Promise<Buffer | null> {
  return new Promise((resolve) => {
    const socket = net.connect({
      host: options.server,
      port: options.port,
      ...(options.localAddress ? { localAddress: options.localAddress } : {}),
    });
    let buffered = Buffer.alloc(0);
    const timer = setTimeout(() => finish(null), timeoutMs);
    const finish = (value: Buffer | null): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(value);
    };
    socket.on('error', () => finish(null));
    socket.on('connect', () => {
      const frame = Buffer.alloc(2);
      frame.writeUInt16BE(query.length);
      socket.write(Buffer.concat([frame, query]));
    });
    socket.on('data', (chunk) => {
      buffered = Buffer.concat([buffered, chunk]);
      if (buffered.length >= 2 && buffered.length >= 2 + buffered.readUInt16BE(0)) {
        finish(buffered.subarray(2, 2 + buffered.readUInt16BE(0)));
      }
    });
  });
}
