import type { FileHandle } from 'node:fs/promises';

/** Reads and writes of file contents go in pieces of this size (fewer syscalls and thread-pool hops): 1 MiB. */
export const IO_CHUNK_BYTES = 1024 * 1024;

/**
 * What {@link writeCoalesced} reads: a stream that emits `data` chunks (Buffer, Uint8Array or string), `end`,
 * `error` and `close`, and can be paused: a Node `Readable` or a Minipass stream (the `tar` package's entries).
 */
export type ChunkSource = NodeJS.EventEmitter & {
  pause(): unknown;
  resume(): unknown;
  destroy(error?: Error): unknown;
};

/**
 * Write everything `source` emits to `fh` at its position, copied into two buffers of {@link IO_CHUNK_BYTES} that
 * are reused for the whole stream: one is written on the thread pool while the next fills (receiving and writing
 * overlap); `source` is paused while both are busy, so about 2 MiB plus one chunk are held whatever its speed.
 * A failed write (for example `ENOSPC`) destroys `source` and is thrown once no write is running on `fh` any more
 * (the caller closes it).
 *
 * Why copy: network reads arrive as new 64 KiB buffers outside V8's heap. Kept until their batch was written they
 * outlive young-generation collections and are freed only by full ones; written as a list of 16+ pieces per MiB
 * they cost the thread pool about twice the system time of one contiguous buffer (measured A/B). Copied at once
 * into the reused buffers, each dies young. Chunks are taken from `data` events, never through the async iterator:
 * a Node `Readable`'s iterator calls `read()`, which joins every chunk buffered at that moment into a new buffer
 * (1.2 s of the server's JS thread per 2 GiB upload, profiled).
 * @returns the bytes written
 * @throws the write's error, `source`'s error, or an `Error` when `source` closed before its end
 */
export function writeCoalesced(fh: FileHandle, source: ChunkSource): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const buffers = [Buffer.allocUnsafeSlow(IO_CHUNK_BYTES), Buffer.allocUnsafeSlow(IO_CHUNK_BYTES)] as const;
    let current = 0;
    let fill = 0;
    /** Received bytes not yet copied (both buffers busy). */
    const queue: Buffer[] = [];
    let total = 0;
    let writing = false;
    let paused = false;
    let ended = false;
    let settled = false;
    let failure: unknown = null;
    const writeAll = async (buffer: Buffer, bytes: number) => {
      for (let written = 0; written < bytes; ) {
        written += (await fh.write(buffer, written, bytes - written)).bytesWritten;
      }
    };
    const detach = () => {
      source.off('data', onData);
      source.off('end', onEnd);
      source.off('error', onError);
      source.off('close', onClose);
      // A late error of a source given up on (destroyed below, or erroring after its close) is not an uncaught one.
      source.on('error', () => undefined);
    };
    // Settles once, and only while no write runs on `fh`.
    const settle = (error: unknown) => {
      if (settled) return;
      settled = true;
      detach();
      if (error === null) resolve(total);
      else reject(error);
    };
    const fail = (error: unknown) => {
      if (failure !== null || settled) return;
      failure = error;
      if (!writing) settle(error);
    };
    const step = () => {
      for (;;) {
        const target = buffers[current] as Buffer;
        while (queue.length > 0 && fill < IO_CHUNK_BYTES) {
          const head = queue[0] as Buffer;
          const copied = head.copy(target, fill);
          fill += copied;
          if (copied === head.length) queue.shift();
          else queue[0] = head.subarray(copied);
        }
        const ready = fill === IO_CHUNK_BYTES || (ended && queue.length === 0 && fill > 0);
        if (!ready || writing) break;
        const bytes = fill;
        current ^= 1;
        fill = 0;
        writing = true;
        writeAll(target, bytes).then(
          () => {
            writing = false;
            total += bytes;
            if (failure !== null) settle(failure);
            else step();
          },
          (error: unknown) => {
            writing = false;
            failure ??= error;
            source.destroy();
            settle(failure);
          },
        );
      }
      if (ended && !writing && fill === 0 && queue.length === 0) {
        settle(null);
      } else if (queue.length > 0 !== paused && !ended) {
        paused = !paused;
        if (paused) source.pause();
        else source.resume();
      }
    };
    const onData = (chunk: unknown) => {
      if (failure !== null) return;
      queue.push(
        Buffer.isBuffer(chunk)
          ? chunk
          : typeof chunk === 'string'
            ? Buffer.from(chunk)
            : Buffer.from(
                (chunk as Uint8Array).buffer,
                (chunk as Uint8Array).byteOffset,
                (chunk as Uint8Array).byteLength,
              ),
      );
      step();
    };
    const onEnd = () => {
      ended = true;
      if (failure === null) step();
    };
    const onError = (error: Error) => fail(error);
    const onClose = () => {
      if (!ended) fail(new Error('the stream closed before its end'));
    };
    const state = source as { readableEnded?: boolean; errored?: Error | null; destroyed?: boolean };
    if (state.errored) {
      settle(state.errored);
      return;
    }
    if (state.readableEnded === true) {
      settle(null);
      return;
    }
    if (state.destroyed === true) {
      settle(new Error('the stream closed before its end'));
      return;
    }
    // `data` last: a Minipass stream flushes what it buffered (and may end) as soon as a `data` listener comes.
    source.on('end', onEnd);
    source.on('error', onError);
    source.on('close', onClose);
    source.on('data', onData);
    source.resume();
  });
}
