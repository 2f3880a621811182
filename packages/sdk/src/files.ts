import type { ArchiveUploadResult, FileInfo, FileWatchEvent } from '@burrow/contract';
import {
  ArchiveUploadResultParser,
  BatchWriteResponseParser,
  ExistsResponseParser,
  FileInfoParser,
  FileListParser,
  FileWatchEventParser,
} from './contract-wire.js';
import { FileNotFoundError } from './errors.js';
import { type HttpClient, parseStrict } from './http-client.js';
import { SseParser } from './sse-parser.js';

/** Read and write size of local files in {@link Files.writeFromFile} and {@link Files.readToFile}: 1 MiB. */
const LOCAL_IO_CHUNK_BYTES = 1024 * 1024;

/** Bytes to write: text (UTF-8), a buffer, or a stream read as it is sent (any size). */
export type FileData = string | Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>;

/** Options of {@link Files.write}. */
export interface WriteFileOptions {
  /** Permission bits of the file, for example `0o755`. @default 0o644 */
  mode?: number | undefined;
  /** Cancels the upload. */
  signal?: AbortSignal | undefined;
}

/** Options of {@link Files.writeFromFile} and {@link Files.readToFile}. */
export interface LocalFileTransferOptions {
  /** Called as bytes go by with the total so far, in bytes (for a progress bar). */
  onProgress?: ((transferredBytes: number) => void) | undefined;
  /** Cancels the transfer. */
  signal?: AbortSignal | undefined;
}

/** One file of {@link Files.writeMany}. */
export interface BatchFile {
  /** Absolute path in the sandbox. */
  path: string;
  /** Text (written as UTF-8) or bytes. */
  data: string | Uint8Array;
  /** Permission bits. @default 0o644 */
  mode?: number | undefined;
}

/** Options of {@link Files.download}. */
export interface DownloadOptions {
  /** Gzip the tar on the server (smaller over slow links, slower on fast ones). @default false */
  gzip?: boolean | undefined;
  signal?: AbortSignal | undefined;
}

/** Options of {@link Files.watch}. */
export interface WatchOptions {
  /** Include subdirectories, also ones created later. @default false */
  recursive?: boolean | undefined;
  /** Ends the watch. */
  signal?: AbortSignal | undefined;
}

/** Options of {@link Files.list}. */
export interface ListFilesOptions {
  /** How many levels to recurse: 1 lists direct children only. @default 1; at most 32 */
  depth?: number | undefined;
}

/** Options of {@link Files.remove}. */
export interface RemoveFileOptions {
  /** Remove a directory with its contents. @default false */
  recursive?: boolean | undefined;
}

/**
 * Reads and writes files in one sandbox: `sandbox.files`. Paths are absolute inside the sandbox.
 *
 * @example
 * ```ts
 * await sandbox.files.write('/root/hello.py', 'print("hi")\n');
 * const text = await sandbox.files.readText('/root/hello.py');
 * ```
 */
export class Files {
  readonly #http: HttpClient;
  readonly #base: string;

  /** @internal Use `sandbox.files` (or `volume.files`, which passes the volume's `base`). */
  constructor(http: HttpClient, sandboxId: string, base?: string) {
    this.#http = http;
    this.#base = base ?? `/sandboxes/${encodeURIComponent(sandboxId)}/files`;
  }

  /**
   * Writes a whole file, creating or replacing it. Text is written as UTF-8.
   * @returns the file's metadata after the write.
   * @throws `FileSystemError` when a parent is not a directory or the path is a directory; `InvalidRequestError` for a
   * bad path; `FileSystemError` (`no_space`) when the sandbox disk fills; `SandboxNotFoundError`. Streams are sent as
   * they are read, so files of any size never sit in memory.
   * @example
   * ```ts
   * await sandbox.files.write('/root/run.sh', '#!/bin/sh\necho hi\n', { mode: 0o755 });
   * ```
   */
  async write(path: string, data: FileData, options: WriteFileOptions = {}): Promise<FileInfo> {
    const body = typeof data === 'string' ? new TextEncoder().encode(data) : data;
    return this.#http.json(FileInfoParser, 'PUT', `${this.#base}/content`, {
      query: { path, mode: (options.mode ?? 0o644).toString(8).padStart(3, '0') },
      body,
      signal: options.signal,
    });
  }

  /**
   * Reads a whole file as bytes.
   * @throws {@link FileNotFoundError} when the path does not exist; `FileSystemError` when it is a directory.
   * @example
   * ```ts
   * const png = await sandbox.files.read('/root/plot.png');
   * ```
   */
  async read(path: string, options: { signal?: AbortSignal | undefined } = {}): Promise<Uint8Array> {
    const response = await this.#http.send('GET', `${this.#base}/content`, { query: { path }, signal: options.signal });
    return new Uint8Array(await response.arrayBuffer());
  }

  /**
   * Reads a whole file as UTF-8 text.
   * @throws {@link FileNotFoundError} when the path does not exist; `FileSystemError` when it is a directory.
   * @example
   * ```ts
   * const config = JSON.parse(await sandbox.files.readText('/root/config.json'));
   * ```
   */
  async readText(path: string): Promise<string> {
    return new TextDecoder().decode(await this.read(path));
  }

  /**
   * Lists a directory.
   * @returns the entries, recursing `depth` levels.
   * @throws {@link FileNotFoundError} when the path does not exist; `FileSystemError` when it is not a directory.
   * @example
   * ```ts
   * for (const entry of await sandbox.files.list('/root', { depth: 2 })) console.log(entry.type, entry.path);
   * ```
   */
  async list(path: string, options: ListFilesOptions = {}): Promise<FileInfo[]> {
    const list = await this.#http.json(FileListParser, 'GET', this.#base, { query: { path, depth: options.depth } });
    return list.items;
  }

  /**
   * Metadata of one path (a symlink itself, not its target).
   * @throws {@link FileNotFoundError} when the path does not exist.
   * @example
   * ```ts
   * const { sizeBytes } = await sandbox.files.stat('/root/data.csv');
   * ```
   */
  async stat(path: string): Promise<FileInfo> {
    return this.#http.json(FileInfoParser, 'GET', `${this.#base}/stat`, { query: { path } });
  }

  /**
   * Whether a path exists.
   * @throws `SandboxNotFoundError`, `ConnectionError` (never {@link FileNotFoundError}).
   * @example
   * ```ts
   * if (!(await sandbox.files.exists('/root/.venv'))) await sandbox.commands.run('python3 -m venv /root/.venv');
   * ```
   */
  async exists(path: string): Promise<boolean> {
    const res = await this.#http.json(ExistsResponseParser, 'GET', `${this.#base}/exists`, { query: { path } });
    return res.exists;
  }

  /**
   * Creates a directory and its missing parents (like `mkdir -p`).
   * @returns the directory's metadata.
   * @throws `FileSystemError` when a path component is a file.
   * @example
   * ```ts
   * await sandbox.files.mkdir('/root/project/src');
   * ```
   */
  async mkdir(path: string): Promise<FileInfo> {
    return this.#http.json(FileInfoParser, 'POST', `${this.#base}/mkdir`, { json: { path } });
  }

  /**
   * Removes a file, or a directory when `recursive` is true (an empty directory without it).
   * @throws {@link FileNotFoundError} when the path does not exist; `FileSystemError` (`directory_not_empty`) for a
   * non-empty directory without `recursive`.
   * @example
   * ```ts
   * await sandbox.files.remove('/root/build', { recursive: true });
   * ```
   */
  async remove(path: string, options: RemoveFileOptions = {}): Promise<void> {
    await this.#http.empty('DELETE', this.#base, { query: { path, recursive: options.recursive === true } });
  }

  /**
   * Renames or moves a path inside the sandbox.
   * @throws {@link FileNotFoundError} when `from` does not exist; `FileSystemError` when `to` conflicts.
   * @example
   * ```ts
   * await sandbox.files.rename('/root/out.tmp', '/root/out.json');
   * ```
   */
  async rename(from: string, to: string): Promise<void> {
    await this.#http.empty('POST', `${this.#base}/rename`, { json: { from, to } });
  }

  /**
   * Reads a file as a stream (for files too big to hold in memory).
   * @returns the bytes as a web `ReadableStream`; its size, when the server sent one, in `sizeBytes`.
   * @throws {@link FileNotFoundError} when the path does not exist; `FileSystemError` when it is a directory.
   * @example
   * ```ts
   * const { stream } = await sandbox.files.readStream('/root/big.bin');
   * await stream.pipeTo(Writable.toWeb(createWriteStream('big.bin')));
   * ```
   */
  async readStream(
    path: string,
    options: { signal?: AbortSignal | undefined } = {},
  ): Promise<{ stream: ReadableStream<Uint8Array>; sizeBytes: number | undefined }> {
    const response = await this.#http.send('GET', `${this.#base}/content`, { query: { path }, signal: options.signal });
    const length = response.headers.get('content-length');
    return {
      stream: response.body ?? new ReadableStream({ start: (c) => c.close() }),
      sizeBytes: length === null ? undefined : Number(length),
    };
  }

  /**
   * Node.js only: uploads the local file `localPath` to `path`, streamed in 1 MiB reads (the fastest way to send a big
   * file: no web-stream conversion, a quarter of the client CPU of 64 KiB reads), atomically, creating parents.
   * @param options.mode permission bits. @default 0o644 (not the local file's mode)
   * @returns the file's metadata after the write.
   * @throws as {@link write}; a local read error (for example `ENOENT`) as thrown by `node:fs`.
   * @example
   * ```ts
   * await sandbox.files.writeFromFile('/root/data.bin', './data.bin');
   * ```
   */
  async writeFromFile(
    path: string,
    localPath: string,
    options: WriteFileOptions & Pick<LocalFileTransferOptions, 'onProgress'> = {},
  ): Promise<FileInfo> {
    const { createReadStream } = await import('node:fs');
    const file = createReadStream(localPath, { highWaterMark: LOCAL_IO_CHUNK_BYTES });
    const source = options.onProgress === undefined ? file : file.pipe(await progressCounter(options.onProgress));
    try {
      return await this.write(path, source, { mode: options.mode, signal: options.signal });
    } finally {
      file.destroy();
    }
  }

  /**
   * Node.js only: downloads the file `path` into the local file `localPath` (created or replaced), streamed.
   * Over the default `fetch` and plain `http:` the socket reads into two reused 1 MiB buffers written straight to the
   * file (a tenth of the client CPU of node:http's 64 KiB reads, which made V8 run a full GC every ~20 MB); over
   * `https:` it uses node:http, with a custom `fetch` {@link readStream}.
   * @returns the bytes written.
   * @throws {@link FileNotFoundError} when the path does not exist; `FileSystemError` when it is a directory; a local
   * write error as thrown by `node:fs`.
   * @example
   * ```ts
   * const { sizeBytes } = await sandbox.files.readToFile('/root/out.bin', './out.bin');
   * ```
   */
  async readToFile(
    path: string,
    localPath: string,
    options: LocalFileTransferOptions = {},
  ): Promise<{ sizeBytes: number }> {
    const direct = await this.#http.getIntoFile(`${this.#base}/content`, localPath, {
      query: { path },
      signal: options.signal,
      onProgress: options.onProgress,
    });
    if (direct !== undefined) return direct;
    const { createWriteStream } = await import('node:fs');
    const { Readable } = await import('node:stream');
    const { pipeline } = await import('node:stream/promises');
    const res = await this.#http.sendNode('GET', `${this.#base}/content`, { query: { path }, signal: options.signal });
    const source =
      res ??
      Readable.fromWeb(
        (await this.readStream(path, { signal: options.signal }))
          .stream as import('node:stream/web').ReadableStream<Uint8Array>,
      );
    const sink = createWriteStream(localPath, { highWaterMark: LOCAL_IO_CHUNK_BYTES });
    if (options.onProgress === undefined) await pipeline(source, sink);
    else await pipeline(source, await progressCounter(options.onProgress), sink);
    return { sizeBytes: sink.bytesWritten };
  }

  /**
   * Writes several files in one call, in order, each atomically (at most 1000 files and 64 MiB; send bigger sets
   * with {@link upload}).
   * @returns each file's metadata, in order.
   * @throws `InvalidRequestError` for a bad path or mode; `FileSystemError` as {@link write} (files before the failing
   * one are written).
   * @example
   * ```ts
   * await sandbox.files.writeMany([{ path: '/root/a.py', data: 'print(1)' }, { path: '/root/b.bin', data: bytes }]);
   * ```
   */
  async writeMany(files: readonly BatchFile[]): Promise<FileInfo[]> {
    const body = {
      files: files.map((f) => ({
        path: f.path,
        ...(typeof f.data === 'string'
          ? { content: f.data, encoding: 'utf8' as const }
          : { content: bytesToBase64(f.data), encoding: 'base64' as const }),
        mode: (f.mode ?? 0o644).toString(8).padStart(3, '0'),
      })),
    };
    const res = await this.#http.json(BatchWriteResponseParser, 'POST', `${this.#base}/batch`, { json: body });
    return res.items;
  }

  /**
   * Extracts a tar archive (gzip detected) into the directory `path`, created with its parents. The archive is
   * streamed; entries that would leave the directory, devices and FIFOs are skipped and setuid bits cleared.
   * @returns counts, and every entry skipped or changed with the reason (`issues`).
   * @throws `InvalidRequestError` for a malformed archive; `FileSystemError` (`no_space`, `not_a_directory`).
   * @example
   * ```ts
   * const result = await sandbox.files.upload('/root/project', Readable.toWeb(createReadStream('project.tar')));
   * for (const issue of result.issues) console.warn(issue.path, issue.reason);
   * ```
   */
  async upload(
    path: string,
    archive: Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
    options: { signal?: AbortSignal | undefined } = {},
  ): Promise<ArchiveUploadResult> {
    return this.#http.json(ArchiveUploadResultParser, 'PUT', `${this.#base}/archive`, {
      query: { path },
      body: archive,
      contentType: 'application/x-tar',
      signal: options.signal,
    });
  }

  /**
   * Downloads the directory `path` as a tar stream (symlinks stored as links, never followed).
   * @throws {@link FileNotFoundError}; `FileSystemError` (`not_a_directory`).
   * @example
   * ```ts
   * const tar = await sandbox.files.download('/root/project', { gzip: true });
   * await tar.pipeTo(Writable.toWeb(createWriteStream('project.tgz')));
   * ```
   */
  async download(path: string, options: DownloadOptions = {}): Promise<ReadableStream<Uint8Array>> {
    const response = await this.#http.send('GET', `${this.#base}/archive`, {
      query: { path, gzip: options.gzip === true },
      signal: options.signal,
    });
    return response.body ?? new ReadableStream({ start: (c) => c.close() });
  }

  /**
   * Sets the permission bits of a path.
   * @returns the path's metadata after the change.
   * @throws {@link FileNotFoundError}.
   * @example
   * ```ts
   * await sandbox.files.chmod('/root/run.sh', 0o755);
   * ```
   */
  async chmod(path: string, mode: number): Promise<FileInfo> {
    return this.#http.json(FileInfoParser, 'POST', `${this.#base}/chmod`, {
      json: { path, mode: mode.toString(8).padStart(3, '0') },
    });
  }

  /**
   * Watches a directory: yields `ready` once the watch is in place, then create / modify / delete / rename events,
   * until the signal aborts, the loop breaks, or an `end` event (sandbox stopped, directory removed).
   * @throws {@link FileNotFoundError}; `FileSystemError` (`not_a_directory`).
   * @example
   * ```ts
   * for await (const event of sandbox.files.watch('/root/out', { recursive: true })) {
   *   if (event.type === 'create') console.log('new', event.path);
   * }
   * ```
   */
  async *watch(path: string, options: WatchOptions = {}): AsyncGenerator<FileWatchEvent> {
    const abort = new AbortController();
    const onAbort = () => abort.abort(options.signal?.reason);
    options.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const response = await this.#http.send('GET', `${this.#base}/watch`, {
        query: { path, recursive: options.recursive === true },
        headers: { accept: 'text/event-stream' },
        signal: abort.signal,
      });
      if (response.body === null) return;
      const parser = new SseParser();
      const decoder = new TextDecoder();
      const reader = response.body.getReader();
      try {
        for (;;) {
          const { value, done } = await reader.read().catch((err: unknown) => {
            if (abort.signal.aborted) return { value: undefined, done: true as const };
            throw err;
          });
          const texts = done ? parser.end() : parser.push(decoder.decode(value, { stream: true }));
          for (const text of texts) {
            const event = await parseStrict(FileWatchEventParser, JSON.parse(text));
            yield event;
            if (event.type === 'end') return;
          }
          if (done) return;
        }
      } finally {
        reader.releaseLock();
      }
    } finally {
      options.signal?.removeEventListener('abort', onAbort);
      abort.abort();
    }
  }
}

function bytesToBase64(bytes: Uint8Array): string {
  let binary = '';
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

/** A pass-through Node stream that reports the running total of bytes to `onProgress`. */
async function progressCounter(
  onProgress: (transferredBytes: number) => void,
): Promise<import('node:stream').Transform> {
  const { Transform } = await import('node:stream');
  let total = 0;
  return new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      total += chunk.length;
      onProgress(total);
      callback(null, chunk);
    },
  });
}
