import type { Readable } from 'node:stream';
import type { ErrorCode, FileInfo } from '@burrow/contract';

/** A file call failed; `code` is the API error code to answer with. */
export class FsError extends Error {
  override readonly name = 'FsError';
  constructor(
    readonly code: ErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * File access beneath a sandbox's host root directory, resolved the way the sandbox's own kernel would
 * (RESOLVE_IN_ROOT): `..` stops at the root, absolute and relative symlinks are re-rooted, and no call ever
 * reaches a host file outside the root. Paths are absolute sandbox paths (`/root/a.txt`).
 *
 * IMPLEMENTATION PENDING (being written now) — the signatures below are final.
 */
export class SandboxFs {
  constructor(readonly rootDir: string) {}
  /** Metadata of `path` (a final symlink is reported, not followed). @throws FsError */
  stat(_path: string): Promise<FileInfo> {
    throw new Error('pending');
  }
  /** A stream of the file's bytes (symlinks followed inside the root). @throws FsError */
  openRead(_path: string): Promise<{ stream: Readable; sizeBytes: number }> {
    throw new Error('pending');
  }
  /** Write `data` to `path`, creating missing parents; `mode` are permission bits. @throws FsError */
  write(_path: string, _data: Buffer | Readable, _options?: { mode?: number }): Promise<FileInfo> {
    throw new Error('pending');
  }
  /** Entries beneath a directory, `depth` levels deep (1 = direct children). @throws FsError */
  list(_path: string, _options?: { depth?: number }): Promise<FileInfo[]> {
    throw new Error('pending');
  }
  /** `mkdir -p`. @throws FsError */
  mkdir(_path: string): Promise<FileInfo> {
    throw new Error('pending');
  }
  /** Remove a file, symlink or (with `recursive`) a directory tree. @throws FsError */
  remove(_path: string, _options?: { recursive?: boolean }): Promise<void> {
    throw new Error('pending');
  }
  /** Rename `from` to `to` (both inside the root). @throws FsError */
  rename(_from: string, _to: string): Promise<void> {
    throw new Error('pending');
  }
}
