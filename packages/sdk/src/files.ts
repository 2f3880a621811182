import { type FileInfo, FileInfoSchema, FileListSchema } from '@burrow/contract';
import { FileNotFoundError } from './errors.js';
import type { HttpClient } from './http-client.js';

/** Options of {@link Files.write}. */
export interface WriteFileOptions {
  /** Permission bits of the file, for example `0o755`. @default 0o644 */
  mode?: number | undefined;
  /** Cancels the upload. */
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

  /** @internal Use `sandbox.files`. */
  constructor(http: HttpClient, sandboxId: string) {
    this.#http = http;
    this.#base = `/sandboxes/${encodeURIComponent(sandboxId)}/files`;
  }

  /**
   * Writes a whole file, creating or replacing it. Text is written as UTF-8.
   * @returns the file's metadata after the write.
   * @throws `FileSystemError` when a parent is not a directory or the path is a directory; `InvalidRequestError` for a
   * bad path or a file over 512 MiB; `SandboxNotFoundError`.
   * @example
   * ```ts
   * await sandbox.files.write('/root/run.sh', '#!/bin/sh\necho hi\n', { mode: 0o755 });
   * ```
   */
  async write(path: string, data: string | Uint8Array, options: WriteFileOptions = {}): Promise<FileInfo> {
    const body = typeof data === 'string' ? new TextEncoder().encode(data) : data;
    return this.#http.json(FileInfoSchema, 'PUT', `${this.#base}/content`, {
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
    const list = await this.#http.json(FileListSchema, 'GET', this.#base, { query: { path, depth: options.depth } });
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
    return this.#http.json(FileInfoSchema, 'GET', `${this.#base}/stat`, { query: { path } });
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
    try {
      await this.stat(path);
      return true;
    } catch (err) {
      if (err instanceof FileNotFoundError) return false;
      throw err;
    }
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
    return this.#http.json(FileInfoSchema, 'POST', `${this.#base}/mkdir`, { json: { path } });
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
}
