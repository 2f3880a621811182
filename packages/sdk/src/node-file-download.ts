/**
 * Node.js only: one `GET` over plain HTTP/1.1 whose 200 body (with a Content-Length) goes straight into a local file,
 * the socket reading into two reused 1 MiB buffers (`net.Socket`'s `onread`) that are written to the file in turn.
 *
 * Why not node:http: it reads a socket 64 KiB at a time, each read a new buffer outside V8's heap plus a pass
 * through the parser and the stream machinery. In a process with the SDK loaded (a heap of ~10 MB) V8 answered that
 * memory with a full mark-compact every ~20 MB: 110 of them and 5.1 s of user CPU for one 2 GiB download, against
 * 0.1 s this way, on a 2-core host where the server needs the other core.
 */
import type { FileHandle } from 'node:fs/promises';

/** Size of each of the two receive buffers: 1 MiB. */
const RECEIVE_BUFFER_BYTES = 1024 * 1024;
/** A buffer with less room than this left is written out before the next read: 64 KiB (one node:http read). */
const MIN_READ_ROOM_BYTES = 64 * 1024;
/** Longest response head accepted: 64 KiB. */
const MAX_HEAD_BYTES = 64 * 1024;

/** A local file call of {@link getIntoFile} failed (`cause`: the error as thrown by node:fs). */
export class LocalFileFailure extends Error {
  constructor(override readonly cause: unknown) {
    super('writing the local file failed');
  }
}

/** How {@link getIntoFile} ended. */
export type FileDownloadOutcome =
  /** The body is in the file. */
  | { kind: 'done'; sizeBytes: number }
  /** Not a 200 with a Content-Length: the answer, read whole (an error envelope), nothing written. */
  | { kind: 'answer'; status: number; text: string; requestId: string }
  /** A 200 this reader does not handle (no Content-Length, or a transfer coding): send it another way. */
  | { kind: 'unsupported' };

/**
 * GET `url` (`http:` only) with `headers`; a 200 body with a Content-Length is written to `localPath` (created or
 * truncated; only then). At most 2 MiB are held: a slow disk pauses the socket.
 * @param options.onProgress called after each write with the bytes written so far
 * @throws a network error, a local file error, an `Error` when the connection ends before the body's end or the
 * head is malformed; `signal`'s reason when aborted
 */
export async function getIntoFile(
  url: URL,
  headers: Record<string, string>,
  localPath: string,
  options: { signal?: AbortSignal | undefined; onProgress?: ((transferredBytes: number) => void) | undefined } = {},
): Promise<FileDownloadOutcome> {
  const net = await import('node:net');
  const { open } = await import('node:fs/promises');
  const signal = options.signal;
  signal?.throwIfAborted();
  for (const [key, value] of Object.entries(headers)) {
    if (/[\r\n:]/.test(key) || /[\r\n]/.test(value)) throw new Error(`invalid header ${JSON.stringify(key)}`);
  }
  const buffers = [Buffer.allocUnsafe(RECEIVE_BUFFER_BYTES), Buffer.allocUnsafe(RECEIVE_BUFFER_BYTES)] as const;
  let current = 0;
  let filled = 0;
  return new Promise<FileDownloadOutcome>((resolve, reject) => {
    let settled = false;
    let head: { status: number; contentLength: number | null; requestId: string; bodyStart: number } | null = null;
    let file: FileHandle | null = null;
    let opening: Promise<FileHandle> | null = null;
    let writing: Promise<void> | null = null;
    let writtenBytes = 0;
    let receivedBodyBytes = 0;
    let bodyStart = 0;
    const answerChunks: Buffer[] = [];
    const socket = net.connect({
      host: url.hostname.replace(/^\[|\]$/g, ''),
      port: Number(url.port || 80),
      onread: {
        // Each read appends to the current buffer.
        buffer: () => (buffers[current] as Buffer).subarray(filled),
        callback: (bytes: number) => onRead(bytes),
      },
    });
    const finish = (error: unknown, outcome?: FileDownloadOutcome) => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener('abort', onAbort);
      socket.destroy();
      // The file is closed after any write still in flight.
      const closing = (async () => {
        await writing?.catch(() => undefined);
        const handle = file ?? (await opening?.catch(() => null)) ?? null;
        await handle?.close();
      })();
      closing.then(
        () => (error === null && outcome !== undefined ? resolve(outcome) : reject(error)),
        (closeError: unknown) => reject(error ?? closeError),
      );
    };
    const onAbort = () => finish(signal?.reason ?? new Error('aborted'));
    signal?.addEventListener('abort', onAbort, { once: true });
    const complete = () => head?.status === 200 && receivedBodyBytes === head.contentLength;
    // Once the whole body is in, the last write's end settles (the server may close or reset first).
    socket.on('error', (error) => {
      if (!complete()) finish(error);
    });
    socket.on('end', () => {
      if (complete()) return;
      if (head !== null && head.contentLength === null) {
        finish(null, {
          kind: 'answer',
          status: head.status,
          text: Buffer.concat(answerChunks).toString('utf8'),
          requestId: head.requestId,
        });
      } else if (head?.status === 200) {
        finish(new Error(`the connection closed after ${receivedBodyBytes} of ${head.contentLength} body bytes`));
      } else if (head !== null) {
        finish(null, {
          kind: 'answer',
          status: head.status,
          text: Buffer.concat(answerChunks).toString('utf8'),
          requestId: head.requestId,
        });
      } else {
        finish(new Error('the connection closed before a response head'));
      }
    });
    socket.on('connect', () => {
      const lines = [`GET ${url.pathname}${url.search} HTTP/1.1`, `host: ${url.host}`, 'connection: close'];
      for (const [key, value] of Object.entries(headers)) lines.push(`${key}: ${value}`);
      socket.write(`${lines.join('\r\n')}\r\n\r\n`);
    });

    /** Write `buffer[0, end)` from `start` to the file, after the previous write; the file is opened on the first. */
    const writeOut = (buffer: Buffer, start: number, end: number): Promise<void> => {
      const previous = writing;
      const next = (async () => {
        await previous;
        try {
          opening ??= open(localPath, 'w');
          file ??= await opening;
          for (let at = start; at < end; ) {
            const { bytesWritten } = await file.write(buffer, at, end - at);
            at += bytesWritten;
          }
        } catch (error) {
          throw new LocalFileFailure(error);
        }
        writtenBytes += end - start;
        options.onProgress?.(writtenBytes);
      })();
      next.catch((error: unknown) => finish(error));
      return next;
    };

    /** Hands the current buffer to the file and switches to the other one (once its write is done). */
    const rotate = (): boolean => {
      const buffer = buffers[current] as Buffer;
      const done = writeOut(buffer, bodyStart, filled);
      const other = writing;
      writing = done;
      current ^= 1;
      filled = 0;
      bodyStart = 0;
      // The other buffer is free once its own write (the one before `done`) ended: `done` awaits it first.
      if (other === null) return true;
      socket.pause();
      other.then(
        () => {
          if (!settled) socket.resume();
        },
        () => undefined,
      );
      return false;
    };

    const onRead = (bytes: number): boolean => {
      if (settled) return false;
      const buffer = buffers[current] as Buffer;
      const start = filled;
      filled += bytes;
      if (head === null) {
        const end = buffer.subarray(0, filled).indexOf('\r\n\r\n');
        if (end < 0) {
          if (filled > MAX_HEAD_BYTES) finish(new Error('the response head is too long'));
          return true;
        }
        head = parseHead(buffer.subarray(0, end).toString('latin1'), end + 4);
        if (head === null) {
          finish(new Error('malformed response head'));
          return false;
        }
        if ((head.status === 200 && head.contentLength === null) || (head.status > 200 && head.status < 300)) {
          finish(null, { kind: 'unsupported' });
          return false;
        }
        bodyStart = head.bodyStart;
        receivedBodyBytes = filled - bodyStart;
      } else {
        receivedBodyBytes += filled - start;
      }
      if (head.status !== 200) {
        answerChunks.push(Buffer.from(buffer.subarray(bodyStart, filled)));
        filled = 0;
        bodyStart = 0;
        if (head.contentLength !== null && receivedBodyBytes >= head.contentLength) {
          finish(null, {
            kind: 'answer',
            status: head.status,
            text: Buffer.concat(answerChunks).toString('utf8'),
            requestId: head.requestId,
          });
          return false;
        }
        return true;
      }
      const contentLength = head.contentLength ?? 0;
      if (receivedBodyBytes > contentLength) {
        finish(new Error(`the server sent more than its Content-Length of ${contentLength} bytes`));
        return false;
      }
      if (receivedBodyBytes === contentLength) {
        const last = writeOut(buffer, bodyStart, filled);
        writing = last;
        last.then(
          () => finish(null, { kind: 'done', sizeBytes: contentLength }),
          () => undefined,
        );
        socket.pause();
        return false;
      }
      if (buffer.length - filled < MIN_READ_ROOM_BYTES) return rotate();
      return true;
    };
  });
}

/** Status, Content-Length (null when absent or with a Transfer-Encoding) and request id of a response head. */
function parseHead(
  text: string,
  bodyStart: number,
): { status: number; contentLength: number | null; requestId: string; bodyStart: number } | null {
  const lines = text.split('\r\n');
  const status = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '');
  if (status === null) return null;
  let contentLength: number | null = null;
  let chunked = false;
  let requestId = '';
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    if (colon <= 0) return null;
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (name === 'content-length') {
      if (!/^\d+$/.test(value) || (contentLength !== null && contentLength !== Number(value))) return null;
      contentLength = Number(value);
    } else if (name === 'transfer-encoding') chunked = true;
    else if (name === 'x-request-id') requestId = value;
  }
  return { status: Number(status[1]), contentLength: chunked ? null : contentLength, requestId, bodyStart };
}
