import type { FileHandle } from 'node:fs/promises';
import { Readable, type Writable } from 'node:stream';

/** Size of one read of {@link FileReadStream}: 1 MiB (as `IO_CHUNK_BYTES` of write-coalesced.ts). */
const READ_CHUNK_BYTES = 1024 * 1024;

/**
 * The first `sizeBytes` bytes of an open file (the size at open: a file that grows meanwhile is sent as it was
 * long, one that shrinks ends the stream with an error). Two ways to consume it:
 *
 * - as any `Readable` (each chunk a new buffer of up to 1 MiB), or
 * - {@link FileReadStream.sendTo}: the bytes written to a `Writable` (an HTTP response) through two buffers of
 *   1 MiB reused for the whole file, each refilled only after the sink's write callback said it was done with it.
 *
 * Why `sendTo`: a new 1 MiB buffer per chunk is memory outside V8's heap; chunks that live past a young-generation
 * collection (a slow reader keeps them queued) are freed only by a full mark-compact, which V8 starts for about
 * every 64 MiB of them. Measured in the server (heap ~25 MB) for one 2 GiB download: up to ~40 full collections,
 * ~4 s of CPU on V8's helper threads and 10–150 ms steps on the main thread, on a 2-core machine where the client
 * needs the other core; with the reused buffers, 0.1 s on the helper threads.
 *
 * Destroying the stream (a pause, stop or delete of the sandbox) stops either way at the next chunk; the handle is
 * closed once no read is in flight, then `close` is emitted. The stream owns `handle`.
 */
export class FileReadStream extends Readable {
  /** Bytes this stream yields: the file's size when it was opened. */
  readonly sizeBytes: number;
  readonly #handle: FileHandle;
  #positionBytes = 0;
  #sending = false;

  constructor(handle: FileHandle, sizeBytes: number) {
    super({ highWaterMark: READ_CHUNK_BYTES });
    this.#handle = handle;
    this.sizeBytes = sizeBytes;
  }

  override _read(): void {
    const length = Math.min(READ_CHUNK_BYTES, this.sizeBytes - this.#positionBytes);
    if (length <= 0) {
      this.push(null);
      return;
    }
    const buffer = Buffer.allocUnsafe(length);
    this.#handle.read(buffer, 0, length, this.#positionBytes).then(
      ({ bytesRead }) => {
        if (bytesRead === 0) {
          this.destroy(shrunk(this.sizeBytes, this.#positionBytes));
          return;
        }
        this.#positionBytes += bytesRead;
        this.push(bytesRead === length ? buffer : buffer.subarray(0, bytesRead));
      },
      (error: unknown) => this.destroy(error as Error),
    );
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    // FileHandle.close waits for a read still in flight on the thread pool.
    this.#handle.close().then(
      () => callback(error),
      (closeError: unknown) => callback(error ?? (closeError as Error)),
    );
  }

  /**
   * Write the whole file to `sink` (not ended: the caller ends it), reading the next chunk while the previous one is
   * being written; at most 2 MiB are held whatever the sink's speed (a slow reader holds the next read back).
   * Destroys this stream when done (its `close` follows).
   * @throws the read or write error; an `Error` when this stream was destroyed, `sink` closed or the file shrank
   * before its end (the sink then got only part of the bytes)
   */
  async sendTo(sink: Writable): Promise<void> {
    if (this.#sending || this.readableFlowing !== null) throw new Error('FileReadStream is already being read');
    this.#sending = true;
    // Errors (the sink's, or the one a pause destroys this stream with) are this call's rejection, not an 'error'
    // event that nobody listens to.
    this.on('error', () => undefined);
    const bufferBytes = Math.max(1, Math.min(READ_CHUNK_BYTES, this.sizeBytes));
    const buffers = [Buffer.allocUnsafeSlow(bufferBytes), Buffer.allocUnsafeSlow(bufferBytes)] as const;
    let writing: Promise<void> | null = null;
    try {
      for (let index = 0; this.#positionBytes < this.sizeBytes; index ^= 1) {
        if (this.destroyed) throw this.errored ?? new Error('the file stream was destroyed before its end');
        // This buffer's previous write was awaited before the other buffer's write started.
        const buffer = buffers[index] as Buffer;
        const length = Math.min(buffer.length, this.sizeBytes - this.#positionBytes);
        const { bytesRead } = await this.#handle.read(buffer, 0, length, this.#positionBytes);
        if (bytesRead === 0) throw shrunk(this.sizeBytes, this.#positionBytes);
        this.#positionBytes += bytesRead;
        if (writing !== null) await writing;
        if (this.destroyed) throw this.errored ?? new Error('the file stream was destroyed before its end');
        writing = writeChunk(sink, buffer.subarray(0, bytesRead));
        // Awaited at the next chunk or below; never an unhandled rejection meanwhile.
        writing.catch(() => undefined);
      }
      if (writing !== null) await writing;
      if (this.destroyed) throw this.errored ?? new Error('the file stream was destroyed before its end');
      this.destroy();
    } catch (error) {
      // A write may still hold a buffer: none is reused after this.
      this.destroy();
      throw error;
    }
  }
}

/** `chunk` written to `sink`, settled by its write callback, or rejected when `sink` closes first. */
function writeChunk(sink: Writable, chunk: Buffer): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const onClose = () => reject(new Error('the receiving side closed before the end of the file'));
    sink.once('close', onClose);
    sink.write(chunk, (error) => {
      sink.off('close', onClose);
      if (error === null || error === undefined) resolve();
      else reject(error);
    });
  });
}

function shrunk(sizeBytes: number, positionBytes: number): Error {
  return new Error(`the file shrank to ${positionBytes} bytes while being read (it had ${sizeBytes} at open)`);
}
