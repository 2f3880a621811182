import { Transform, type TransformCallback } from 'node:stream';
import { SingleBar } from 'cli-progress';

/** Transfers smaller than this show no bar (only the final summary line): 8 MiB. */
export const PROGRESS_MIN_BYTES = 8 * 1024 * 1024;

/**
 * A byte progress bar on stderr for big transfers (cli-progress on a terminal; elsewhere a line every 10 s and none
 * for small transfers), counted by passing the bytes through {@link through}. {@link finish} prints a summary with
 * the rate.
 */
export class ByteProgress {
  readonly #stream: NodeJS.WritableStream & { isTTY?: boolean };
  readonly #label: string;
  readonly #totalBytes: number | undefined;
  readonly #startedAt = Date.now();
  #bar: SingleBar | undefined;
  #bytes = 0;
  #lastLineAt = Date.now();

  /** @param totalBytes expected size, or undefined when unknown (a tar of a directory being packed) */
  constructor(stream: NodeJS.WritableStream, label: string, totalBytes: number | undefined) {
    this.#stream = stream;
    this.#label = label;
    this.#totalBytes = totalBytes;
    const big = totalBytes === undefined || totalBytes >= PROGRESS_MIN_BYTES;
    if (this.#stream.isTTY === true && big) {
      this.#bar = new SingleBar({
        stream: this.#stream as NodeJS.WritableStream as never,
        format:
          totalBytes === undefined
            ? `${label} {mb} MB  {rate} MB/s`
            : `${label} [{bar}] {percentage}%  {mb}/{totalMb} MB  {rate} MB/s  eta {eta_formatted}`,
        hideCursor: true,
        clearOnComplete: true,
      });
      this.#bar.start(totalBytes ?? 1, 0, this.#payload());
    }
  }

  /** Count `n` more bytes. */
  add(n: number): void {
    this.#bytes += n;
    if (this.#bar !== undefined) {
      this.#bar.update(this.#totalBytes === undefined ? 0 : this.#bytes, this.#payload());
    } else if (Date.now() - this.#lastLineAt >= 10_000) {
      this.#lastLineAt = Date.now();
      this.#stream.write(`${this.#label}: ${this.#payload().mb} MB…\n`);
    }
  }

  /** A pass-through stream that counts what flows through it. */
  through(): Transform {
    const add = (n: number) => this.add(n);
    return new Transform({
      transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback) {
        add(chunk.length);
        callback(null, chunk);
      },
    });
  }

  /** Stop the bar and print `label: N MB in S s (R MB/s)` plus `detail`. */
  finish(detail = ''): void {
    this.#bar?.stop();
    const p = this.#payload();
    const seconds = ((Date.now() - this.#startedAt) / 1000).toFixed(1);
    this.#stream.write(`${this.#label}: ${this.#bytes} bytes in ${seconds} s (${p.rate} MB/s)${detail}\n`);
  }

  #payload(): { mb: string; totalMb: string; rate: string } {
    const seconds = Math.max((Date.now() - this.#startedAt) / 1000, 0.001);
    return {
      mb: (this.#bytes / 1e6).toFixed(1),
      totalMb: ((this.#totalBytes ?? 0) / 1e6).toFixed(1),
      rate: (this.#bytes / 1e6 / seconds).toFixed(1),
    };
  }
}
