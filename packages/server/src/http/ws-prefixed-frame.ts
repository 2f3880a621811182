import type { WebSocket } from 'ws';

/** The parts of a `ws` (8.23) WebSocket this module relies on; checked at run time before each use. */
interface WsInternals {
  _socket?: { cork(): void; uncork(): void; write(data: Buffer, callback?: (error?: Error | null) => void): boolean };
  _sender?: { _queue?: unknown[]; _state?: number; _firstFragment?: boolean };
}

/**
 * Send one binary WebSocket message made of a one-byte prefix and `chunk` (or the chunks of a list, one after the
 * other), without copying them into a new buffer: the frame header and the prefix are written as one small buffer
 * and the chunks right behind it, corked into one `writev` (what `ws` itself does for a header and its payload). `Buffer.concat([prefix, chunk])` on every
 * 1 MiB output chunk would be a fresh 1 MiB allocation and copy (~15 % of the server's CPU while streaming, and the
 * external-memory GCs that come with it; ADR 0003 "Streamed output: the socket window and CPU per byte").
 *
 * Server frames are never masked (RFC 6455 §5.1), so the frame is `[0x82][length][prefix][chunk]`. It is written to
 * the connection's socket directly only when `ws`'s sender has nothing queued and is between messages (no
 * compression is negotiated on the exec stream, so it always is); otherwise, or when the `ws` internals are not as
 * expected, it falls back to `socket.send(Buffer.concat([prefix, ...chunks]))`. Either way the message is the same
 * and `socket.bufferedAmount` counts it until written.
 *
 * @param socket - an open `ws` WebSocket (server side)
 * @param prefix - the first byte of the message (0–255)
 * @param chunk - the rest of the message, one buffer or several in order; not copied, so none may change until
 *   `callback`
 * @param callback - called once the message was handed to the kernel (or failed)
 */
export function sendPrefixedBinary(
  socket: WebSocket,
  prefix: number,
  chunk: Buffer | readonly Buffer[],
  callback: (error?: Error | null) => void,
): void {
  const chunks: readonly Buffer[] = Buffer.isBuffer(chunk) ? [chunk] : chunk;
  const internals = socket as unknown as WsInternals;
  const raw = internals._socket;
  const sender = internals._sender;
  const idle =
    raw !== undefined &&
    typeof raw.cork === 'function' &&
    sender !== undefined &&
    Array.isArray(sender._queue) &&
    sender._queue.length === 0 &&
    sender._state === 0 &&
    sender._firstFragment === true;
  if (!idle) {
    socket.send(Buffer.concat([Buffer.from([prefix]), ...chunks]), { binary: true }, callback);
    return;
  }
  let length = 1;
  for (const piece of chunks) length += piece.length;
  let head: Buffer;
  if (length <= 125) {
    head = Buffer.allocUnsafe(3);
    head[1] = length;
  } else if (length <= 0xffff) {
    head = Buffer.allocUnsafe(5);
    head[1] = 126;
    head.writeUInt16BE(length, 2);
  } else {
    head = Buffer.allocUnsafe(11);
    head[1] = 127;
    head.writeUInt32BE(Math.floor(length / 2 ** 32), 2);
    head.writeUInt32BE(length >>> 0, 6);
  }
  head[0] = 0x82; // FIN, binary
  head[head.length - 1] = prefix;
  raw.cork();
  raw.write(head, chunks.length === 0 ? callback : undefined);
  for (const [i, piece] of chunks.entries()) raw.write(piece, i === chunks.length - 1 ? callback : undefined);
  raw.uncork();
}
