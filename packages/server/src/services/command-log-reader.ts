import type { SandboxFs } from '@burrow/runtime';
import { FsError } from '@burrow/runtime';

/** Record header in a log segment: channel byte, payload length (u32 big-endian). */
const HEADER_BYTES = 5;
/** Most bytes read from a segment per {@link LogCursor.next} call. */
const READ_BYTES = 1024 * 1024;
const SEGMENT_NAME = /^(\d{20})\.seg$/;

/** Output of a command: channel 1 is stdout (and a PTY's output), 2 is stderr. */
export interface LogChunk {
  channel: 1 | 2;
  data: Buffer;
}

/** What {@link LogCursor.next} found. */
export interface LogRead {
  chunks: LogChunk[];
  /** Bytes skipped because the ring had dropped them before they were read. */
  droppedBytes: number;
}

/** Start offsets of the segments in a command's log dir, oldest first. */
export async function listSegments(fs: SandboxFs, logDir: string): Promise<number[]> {
  const entries = await fs.list(logDir).catch((error: unknown) => {
    if (error instanceof FsError && error.code === 'file_not_found') return [];
    throw error;
  });
  const starts: number[] = [];
  for (const entry of entries) {
    const match = SEGMENT_NAME.exec(entry.path.slice(entry.path.lastIndexOf('/') + 1));
    if (match?.[1] !== undefined && entry.type === 'file') starts.push(Number(match[1]));
  }
  return starts.sort((a, b) => a - b);
}

/** Oldest kept and next output offsets of a command's log. */
export async function logBounds(fs: SandboxFs, logDir: string): Promise<{ firstOffset: number; endOffset: number }> {
  const starts = await listSegments(fs, logDir);
  const first = starts[0];
  const last = starts.at(-1);
  if (first === undefined || last === undefined) return { firstOffset: 0, endOffset: 0 };
  const cursor = new LogCursor(fs, logDir, last);
  while ((await cursor.next({ countOnly: true })).chunks.length > 0) {
    // counting payload bytes of the newest segment
  }
  return { firstOffset: first, endOffset: cursor.offset };
}

/**
 * Reads a command's log (a ring of segments written by the in-sandbox supervisor) from an output offset. Offsets
 * count payload bytes of both channels. The supervisor opens the next segment only after it finished the current
 * one, and deletes the oldest: a cursor that falls behind the ring skips ahead and reports the gap.
 * Every read goes through {@link SandboxFs}: the files are the sandbox's, so never trusted as host paths.
 */
export class LogCursor {
  /** Output offset of the next byte this cursor returns. */
  offset: number;
  private segment: number | null = null;
  private filePos = 0;
  /** Output offset at `filePos` within the current segment. */
  private posOffset = 0;

  constructor(
    private readonly fs: SandboxFs,
    private readonly logDir: string,
    offset: number,
  ) {
    this.offset = offset;
  }

  /** The complete records written since the last call (up to about 1 MiB); empty when there are none yet. */
  async next(options: { countOnly?: boolean } = {}): Promise<LogRead> {
    let droppedBytes = 0;
    for (let attempt = 0; attempt < 8; ) {
      if (this.segment === null) droppedBytes += await this.seek();
      if (this.segment === null) return { chunks: [], droppedBytes };
      const segment = this.segment;
      const before = this.filePos;
      const bytes = await this.readSegment(segment);
      if (bytes === null) {
        // The ring dropped this segment while we were behind it.
        this.segment = null;
        attempt++;
        continue;
      }
      const chunks = this.parse(bytes, options.countOnly === true);
      if (chunks.length > 0) return { chunks, droppedBytes };
      // Records before the offset were skipped: read on.
      if (this.filePos > before) continue;
      // A partial record: the supervisor is writing it.
      if (bytes.length > 0) return { chunks: [], droppedBytes };
      attempt++;
      const starts = await listSegments(this.fs, this.logDir);
      const newer = starts.find((start) => start > segment);
      if (newer === undefined) return { chunks: [], droppedBytes };
      // A newer segment exists, so this one is complete: re-read its tail once, then move on.
      const tailBytes = await this.readSegment(segment);
      const tailChunks = tailBytes === null ? [] : this.parse(tailBytes, options.countOnly === true);
      if (tailChunks.length > 0) return { chunks: tailChunks, droppedBytes };
      this.segment = newer;
      this.filePos = 0;
      this.posOffset = newer;
      if (this.offset < newer) {
        droppedBytes += newer - this.offset;
        this.offset = newer;
      }
    }
    return { chunks: [], droppedBytes };
  }

  /** Pick the segment holding `offset`; returns bytes skipped because they were dropped. */
  private async seek(): Promise<number> {
    const starts = await listSegments(this.fs, this.logDir);
    if (starts.length === 0) return 0;
    let chosen = starts[0] as number;
    for (const start of starts) if (start <= this.offset) chosen = start;
    let dropped = 0;
    if (this.offset < chosen) {
      dropped = chosen - this.offset;
      this.offset = chosen;
    }
    this.segment = chosen;
    this.filePos = 0;
    this.posOffset = chosen;
    return dropped;
  }

  /** Bytes of the segment from `filePos` on (at most {@link READ_BYTES}), or null when it no longer exists. */
  private async readSegment(segment: number): Promise<Buffer | null> {
    const name = `${this.logDir}/${String(segment).padStart(20, '0')}.seg`;
    const handle = await this.fs.openFile(name).catch((error: unknown) => {
      if (error instanceof FsError && error.code === 'file_not_found') return null;
      throw error;
    });
    if (handle === null) return null;
    try {
      const buffer = Buffer.alloc(READ_BYTES);
      const { bytesRead } = await handle.read(buffer, 0, READ_BYTES, this.filePos);
      return buffer.subarray(0, bytesRead);
    } finally {
      await handle.close();
    }
  }

  /** Complete records of `bytes` (read at `filePos`) past `offset`; advances the position. */
  private parse(bytes: Buffer, countOnly: boolean): LogChunk[] {
    const chunks: LogChunk[] = [];
    let at = 0;
    while (at + HEADER_BYTES <= bytes.length) {
      const channel = bytes[at] as number;
      const length = bytes.readUInt32BE(at + 1);
      if (at + HEADER_BYTES + length > bytes.length) {
        if (at === 0 && HEADER_BYTES + length > READ_BYTES) {
          // One record larger than a read: the supervisor writes at most 64 KiB each, so this is corruption.
          throw new Error(`corrupt command log record of ${length} bytes`);
        }
        break;
      }
      const start = this.posOffset;
      const end = start + length;
      if (end > this.offset) {
        const skip = Math.max(0, this.offset - start);
        const data = countOnly
          ? Buffer.alloc(0)
          : Buffer.from(bytes.subarray(at + HEADER_BYTES + skip, at + HEADER_BYTES + length));
        chunks.push({ channel: channel === 2 ? 2 : 1, data });
        this.offset = end;
      }
      this.posOffset = end;
      at += HEADER_BYTES + length;
    }
    this.filePos += at;
    return chunks;
  }
}
