/**
 * Frames of the exec agent's host sockets (docs/exec-protocol.md §4): `[type u8][length u32 BE][payload]`, read
 * without merging buffers (docs/adr/0003-exec-agent.md, "Streamed output: the socket window and CPU per byte").
 */

/** A frame from or to the agent: `[type u8][length u32 BE][payload]`. */
export interface Frame {
  type: string;
  payload: Buffer;
}

/** Largest frame accepted from a sandbox (the agent sends at most 1 MiB of output per frame, its read size). */
const MAX_FRAME_BYTES = 1024 * 1024;
/**
 * Output frames (`O` stdout, `R` stderr): their payload is a plain byte stream, so one of them may be handed over
 * as several frames of the same type, each a piece of its payload, with the same bytes in the same order.
 */
const STREAM_FRAME_TYPES: ReadonlySet<string> = new Set(['O', 'R']);

/**
 * Reads frames from a socket; stops (and reports an error) on a frame above {@link MAX_FRAME_BYTES}. A frame that
 * lies inside one socket read is handed over as a slice of it (no copy). An output frame ({@link STREAM_FRAME_TYPES})
 * larger than what one read holds of it (output frames are up to 1 MiB, socket reads 64 KiB) is handed over as it
 * arrives: each read's piece of it becomes a frame of the same type, a slice of that read (no copy, no allocation;
 * copying 64 KiB reads into a fresh 1 MiB buffer per frame would be the largest item of the server's own CPU while
 * streaming, page faults and external-memory GCs included). Any other frame larger than one read is copied
 * piece by piece, as the reads arrive, into a buffer of exactly its size allocated when its header is read. So every
 * read is released as soon as its consumer lets go of it.
 * While `onFrame` is null the reader only queues what it is given (a connection not claimed yet).
 * @internal exported for its unit test only
 */
export class FrameReader {
  /** Reads not parsed yet: queued while `onFrame` is null. */
  private queued: Buffer[] = [];
  /** A header split between reads (fewer than 5 bytes). */
  private head: Buffer | null = null;
  /**
   * The frame being read: its type, its length, how much of it has arrived, and the buffer it is copied into (null
   * for an output frame, handed over in pieces).
   */
  private partial: { type: string; length: number; filled: number; payload: Buffer | null } | null = null;
  onFrame: ((frame: Frame) => void) | null = null;

  constructor(private readonly onBad: (reason: string) => void) {}

  /** Inside `parse`: a push from a frame's consumer only queues (the rest of the current read comes first). */
  private parsing = false;

  push(chunk: Buffer): void {
    if (chunk.length > 0) this.queued.push(chunk);
    if (this.parsing) return;
    this.parsing = true;
    try {
      while (this.onFrame !== null && this.queued.length > 0) {
        const next = this.queued.shift() as Buffer;
        const rest = this.parse(next);
        if (rest === null) return;
        if (rest.length > 0) this.queued.unshift(rest);
      }
    } finally {
      this.parsing = false;
    }
  }

  /** Parse frames out of `chunk` while there is a consumer; returns what is left unparsed, or null when stopped. */
  private parse(chunk: Buffer): Buffer | null {
    let at = 0;
    while (at < chunk.length && this.onFrame !== null) {
      const partial = this.partial;
      if (partial !== null) {
        const take = Math.min(partial.length - partial.filled, chunk.length - at);
        const complete = partial.filled + take === partial.length;
        if (complete) this.partial = null;
        if (partial.payload === null) {
          partial.filled += take;
          at += take;
          this.onFrame({ type: partial.type, payload: chunk.subarray(at - take, at) });
        } else {
          chunk.copy(partial.payload, partial.filled, at, at + take);
          partial.filled += take;
          at += take;
          if (complete) this.onFrame({ type: partial.type, payload: partial.payload });
        }
        continue;
      }
      let header: Buffer;
      if (this.head !== null || chunk.length - at < 5) {
        const have = this.head ?? Buffer.alloc(0);
        const take = Math.min(5 - have.length, chunk.length - at);
        const joined = Buffer.concat([have, chunk.subarray(at, at + take)]);
        at += take;
        if (joined.length < 5) {
          this.head = joined;
          continue;
        }
        this.head = null;
        header = joined;
      } else {
        header = chunk.subarray(at, at + 5);
        at += 5;
      }
      const type = String.fromCharCode(header[0] ?? 0);
      const length = header.readUInt32BE(1);
      if (length > MAX_FRAME_BYTES) {
        this.onBad(`frame of ${length} bytes`);
        this.queued = [];
        this.partial = null;
        this.head = null;
        return null;
      }
      if (chunk.length - at >= length) {
        const payload = chunk.subarray(at, at + length);
        at += length;
        this.onFrame({ type, payload });
      } else if (STREAM_FRAME_TYPES.has(type)) {
        // The part of it in this read (if any) is handed over on the next turn of the loop.
        this.partial = { type, length, filled: 0, payload: null };
      } else {
        this.partial = { type, length, filled: 0, payload: Buffer.allocUnsafe(length) };
      }
    }
    return chunk.subarray(at);
  }
}

export function encodeFrame(type: string, payload: Buffer = Buffer.alloc(0)): Buffer {
  const header = Buffer.alloc(5);
  header.write(type, 0, 'latin1');
  header.writeUInt32BE(payload.length, 1);
  return Buffer.concat([header, payload]);
}
