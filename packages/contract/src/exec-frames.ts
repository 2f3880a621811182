/**
 * Streaming exec over plain HTTP at `POST /v1/sandboxes/{id}/exec/stream` (docs/exec-protocol.md §2): both bodies
 * are a sequence of frames `[channel u8][length u32 BE][payload]`. Channels 0–2 are those of {@link ExecChannel}
 * (stdin from the client; stdout, stderr from the server), raw bytes; channel 3 carries one JSON control frame:
 * {@link ExecClientFrame}s from the client (`start` first), {@link ExecServerFrame}s from the server (`started`
 * first, `exit` or `error` last). Zod-free: clients import it through `@burrow/contract/wire`.
 */
import { ExecChannel } from './exec-channel.js';

/** Media type of both bodies of the HTTP exec stream. */
export const EXEC_FRAMES_MEDIA_TYPE = 'application/vnd.burrow.exec-frames';

/** Channels of the HTTP exec stream's frames: {@link ExecChannel}'s, and `control` for JSON control frames. */
export const ExecFrameChannel = { ...ExecChannel, control: 3 } as const;
export type ExecFrameChannel = (typeof ExecFrameChannel)[keyof typeof ExecFrameChannel];

/** Bytes of a frame's header: channel u8, payload length u32 BE. */
export const EXEC_FRAME_HEADER_BYTES = 5;

/** Largest payload a reader accepts in one frame: 16 MiB. Writers split larger data. */
export const EXEC_FRAME_MAX_PAYLOAD_BYTES = 16 * 1024 * 1024;

/** The 5-byte header of a frame of `payloadBytes` bytes on `channel`; the payload follows it on the wire. */
export function execFrameHeader(channel: ExecFrameChannel, payloadBytes: number): Uint8Array {
  const header = new Uint8Array(EXEC_FRAME_HEADER_BYTES);
  header[0] = channel;
  new DataView(header.buffer).setUint32(1, payloadBytes);
  return header;
}

/** A whole frame (header and payload in one buffer), for small frames: control frames and stdin. */
export function execFrame(channel: ExecFrameChannel, payload: Uint8Array | string): Uint8Array {
  const bytes = typeof payload === 'string' ? new TextEncoder().encode(payload) : payload;
  const frame = new Uint8Array(EXEC_FRAME_HEADER_BYTES + bytes.byteLength);
  frame.set(execFrameHeader(channel, bytes.byteLength), 0);
  frame.set(bytes, EXEC_FRAME_HEADER_BYTES);
  return frame;
}

/**
 * Splits a byte stream into frames as its chunks arrive. Output and input channels come out in pieces as their bytes
 * arrive (views of the chunks, never copied or held back); a control frame comes out whole, once all of it arrived.
 * Throws `RangeError` on a frame longer than {@link EXEC_FRAME_MAX_PAYLOAD_BYTES}.
 */
export class ExecFrameReader {
  readonly #header = new Uint8Array(EXEC_FRAME_HEADER_BYTES);
  #headerBytes = 0;
  #channel = 0;
  /** Payload bytes of the current frame not read yet; -1 while its header is incomplete. */
  #remaining = -1;
  #control: Uint8Array[] = [];

  /** Adds `chunk` and returns what it completes, in order: pieces of data frames, whole control frames. */
  push(chunk: Uint8Array): Array<{ channel: number; payload: Uint8Array }> {
    const out: Array<{ channel: number; payload: Uint8Array }> = [];
    let at = 0;
    while (at < chunk.byteLength || this.#remaining === 0) {
      if (this.#remaining < 0) {
        const take = Math.min(EXEC_FRAME_HEADER_BYTES - this.#headerBytes, chunk.byteLength - at);
        this.#header.set(chunk.subarray(at, at + take), this.#headerBytes);
        this.#headerBytes += take;
        at += take;
        if (this.#headerBytes < EXEC_FRAME_HEADER_BYTES) break;
        this.#headerBytes = 0;
        this.#channel = this.#header[0] ?? 0;
        this.#remaining = new DataView(this.#header.buffer).getUint32(1);
        if (this.#remaining > EXEC_FRAME_MAX_PAYLOAD_BYTES) {
          throw new RangeError(
            `an exec frame of ${this.#remaining} bytes is longer than ${EXEC_FRAME_MAX_PAYLOAD_BYTES}`,
          );
        }
        continue;
      }
      const take = Math.min(this.#remaining, chunk.byteLength - at);
      const piece = chunk.subarray(at, at + take);
      at += take;
      this.#remaining -= take;
      if (this.#channel === ExecFrameChannel.control) {
        this.#control.push(piece);
        if (this.#remaining === 0) out.push({ channel: this.#channel, payload: concat(this.#control) });
      } else if (take > 0) {
        out.push({ channel: this.#channel, payload: piece });
      }
      if (this.#remaining === 0) {
        this.#remaining = -1;
        this.#control = [];
      }
    }
    return out;
  }

  /** Whether the stream so far ends at a frame boundary. */
  get atBoundary(): boolean {
    return this.#remaining < 0 && this.#headerBytes === 0;
  }
}

function concat(parts: readonly Uint8Array[]): Uint8Array {
  if (parts.length === 1 && parts[0] !== undefined) return parts[0];
  let total = 0;
  for (const part of parts) total += part.byteLength;
  const out = new Uint8Array(total);
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.byteLength;
  }
  return out;
}
