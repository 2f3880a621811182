/** What {@link readClientHello} finds in the first bytes of a connection. */
export type ClientHelloRead =
  | { kind: 'tls'; serverName: string | null }
  | { kind: 'not-tls' }
  /** More bytes are needed to decide (the first TLS record is not complete). */
  | { kind: 'incomplete' };

const HANDSHAKE = 0x16;
const CLIENT_HELLO = 0x01;
const SERVER_NAME_EXTENSION = 0x0000;
/** A ClientHello larger than this is not waited for (real ones are a few hundred bytes to a few KiB). */
export const MAX_CLIENT_HELLO_BYTES = 16 * 1024 + 5;

/**
 * Classify the first bytes of a TCP connection: a TLS ClientHello (with its SNI host name, or null without one),
 * something else, or too short to tell. Reads only the first TLS record, as sent by clients that put the whole
 * ClientHello in it (every common TLS library does); a ClientHello split across records reads as no name.
 */
export function readClientHello(bytes: Buffer): ClientHelloRead {
  if (bytes.length < 1) return { kind: 'incomplete' };
  if (bytes[0] !== HANDSHAKE) return { kind: 'not-tls' };
  if (bytes.length < 5) return { kind: 'incomplete' };
  const recordLength = bytes.readUInt16BE(3);
  if (bytes.length < 5 + recordLength) {
    return 5 + recordLength > MAX_CLIENT_HELLO_BYTES ? { kind: 'tls', serverName: null } : { kind: 'incomplete' };
  }
  const record = bytes.subarray(5, 5 + recordLength);
  try {
    return { kind: 'tls', serverName: serverNameOf(record) };
  } catch {
    return { kind: 'tls', serverName: null };
  }
}

/** The SNI host name of a handshake record holding a ClientHello; throws RangeError on a short record. */
function serverNameOf(record: Buffer): string | null {
  if (record[0] !== CLIENT_HELLO) return null;
  let at = 4 + 2 + 32; // handshake header, client version, random
  at += 1 + byteAt(record, at); // session id
  at += 2 + record.readUInt16BE(at); // cipher suites
  at += 1 + byteAt(record, at); // compression methods
  if (at + 2 > record.length) return null; // no extensions
  const end = at + 2 + record.readUInt16BE(at);
  at += 2;
  while (at + 4 <= end) {
    const type = record.readUInt16BE(at);
    const length = record.readUInt16BE(at + 2);
    at += 4;
    if (type === SERVER_NAME_EXTENSION) {
      // server_name_list length, then entries of (type u8, length u16, name); type 0 is host_name.
      let entry = at + 2;
      const listEnd = at + 2 + record.readUInt16BE(at);
      while (entry + 3 <= listEnd) {
        const nameType = byteAt(record, entry);
        const nameLength = record.readUInt16BE(entry + 1);
        if (nameType === 0) return record.subarray(entry + 3, entry + 3 + nameLength).toString('ascii');
        entry += 3 + nameLength;
      }
      return null;
    }
    at += length;
  }
  return null;
}

function byteAt(buffer: Buffer, at: number): number {
  const value = buffer[at];
  if (value === undefined) throw new RangeError('short ClientHello');
  return value;
}
