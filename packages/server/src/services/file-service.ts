import { PassThrough, type Readable } from 'node:stream';
import { ErrorCode } from '@burrow/contract';
import { FsError, IO_CHUNK_BYTES, type RuntimeDriver, SandboxFs } from '@burrow/runtime';
import { ApiError } from '../util/api-error.js';
import type { KeyedMutex } from '../util/keyed-mutex.js';
import type { FsHolders, FsRelease } from './fs-holders.js';
import type { Principal } from './key-service.js';
import type { SandboxService } from './sandbox-service.js';

const FS_HINTS: Partial<Record<ErrorCode, string>> = {
  file_not_found: 'list the directory with GET /v1/sandboxes/{id}/files?path=…',
  invalid_path:
    'use an absolute path inside the sandbox (at most 4096 bytes, names of at most 255, for example /root/a.txt); the root itself cannot be removed or moved, nor a directory into itself',
  is_a_directory: 'name a file, or list the directory instead',
  not_a_directory: 'check each component of the path',
  directory_not_empty: 'pass recursive=true to remove it with its contents',
  file_exists: 'pick another name or remove the existing one first',
  no_space: 'free space in the sandbox, or create it with a larger diskMiB',
  forbidden: 'the sandbox file system refused the operation (read-only or permission bits)',
};
/** For a malformed archive upload (the one other `invalid_request` from the file system says what to do itself). */
const BAD_ARCHIVE_HINT =
  'send a whole tar or gzip-compressed tar (for example `tar -czf - DIR`); entries extracted before the error stay';

/** Turn a {@link FsError} into the API error envelope; anything else passes through. */
export function mapFsError(error: unknown): unknown {
  if (!(error instanceof FsError)) return error;
  const hint =
    error.code === 'invalid_request' && error.message.startsWith('not a valid tar archive')
      ? BAD_ARCHIVE_HINT
      : FS_HINTS[error.code];
  return new ApiError(error.code, error.message, { ...(hint === undefined ? {} : { hint }), cause: error });
}

/**
 * File access inside running sandboxes, through {@link SandboxFs} (never by joining host paths). The first file
 * call to a sandbox in this process first removes the temporary files of uploads a killed server left behind
 * ({@link SandboxFs.sweepUploadTemp}): no write of this process is in flight then.
 */
export class FileService {
  /** Sandboxes whose upload leftovers this process has swept (or is sweeping). */
  private readonly swept = new Map<string, Promise<void>>();

  constructor(
    private readonly deps: {
      sandboxes: SandboxService;
      driver: RuntimeDriver;
      mutex: KeyedMutex;
      /** Where long-lived handles (watches) register, to be closed before a pause, stop or delete. */
      holders?: FsHolders | undefined;
      /** Told about each sweep that removed something. @default nothing */
      onSwept?: ((sandboxId: string, names: string[]) => void) | undefined;
    },
  ) {}

  /**
   * Sweep the upload leftovers of running sandbox `id` once per process (call under its lock, while it runs).
   * A failed sweep is retried by the next call and never fails the file call that triggered it.
   */
  private sweepOnce(id: string, fs: SandboxFs): Promise<void> {
    let pending = this.swept.get(id);
    if (pending === undefined) {
      pending = fs.sweepUploadTemp().then(
        (names) => {
          if (names.length > 0) this.deps.onSwept?.(id, names);
        },
        () => {
          this.swept.delete(id);
        },
      );
      this.swept.set(id, pending);
    }
    return pending;
  }

  /**
   * Sweep upload leftovers in every sandbox of `rows` that runs (at startup, before any upload of this process).
   * @returns how many sandboxes were swept
   */
  async sweepRunning(rows: ReadonlyArray<{ tenantId: string; id: string }>): Promise<number> {
    let n = 0;
    for (const { tenantId, id } of rows) {
      await this.deps.mutex.run(id, async () => {
        const sandbox = await this.deps.sandboxes.require(tenantId, id).catch(() => null);
        if (sandbox?.state !== 'running') return;
        await this.sweepOnce(id, new SandboxFs(this.deps.driver.rootDir(id)));
        n += 1;
      });
    }
    return n;
  }

  /**
   * Register a long-lived holder of handles in sandbox `id` (a watch): `release` runs, and is awaited, before the
   * runtime unmounts the sandbox (pause, stop, delete).
   * @returns a function that unregisters it, for when the holder closes on its own
   */
  hold(id: string, release: FsRelease): () => void {
    return this.deps.holders?.hold(id, release) ?? (() => undefined);
  }

  /** Whether sandbox `id` still exists and runs (for long-lived streams such as watches). */
  async isRunning(caller: Principal, id: string): Promise<boolean> {
    const sandbox = await this.deps.sandboxes.require(caller.tenantId, id);
    return sandbox.state === 'running';
  }

  /**
   * Upload `body` with `fn` (a streamed file write or archive extraction) into sandbox `id`. The upload is
   * registered, under the sandbox's lock, as a holder that a pause, stop or delete ends first: `fn` then sees its
   * source fail (a write removes its temporary file), the call answers `conflict` (409), and the runtime proceeds
   * (it never waits for a slow client).
   * @throws ApiError `conflict` when the sandbox was paused, stopped or deleted during the upload, and what
   *   {@link with} throws
   */
  async upload<T>(
    caller: Principal,
    id: string,
    body: Readable,
    fn: (fs: SandboxFs, source: Readable) => Promise<T>,
  ): Promise<T> {
    const source = new PassThrough({ highWaterMark: IO_CHUNK_BYTES });
    // Not pipeline(): ending `source` for a pause must leave the request alone (the 409 is still to be sent).
    body.pipe(source);
    // Why the request body failed (too slow, cut short by the client): the answer, rather than the file system
    // error the write then reports. The client's doing, logged as a rejection, not as a server failure.
    let bodyFailure: ApiError | undefined;
    body.once('error', (error) => {
      if (error instanceof ApiError) bodyFailure = error;
      source.destroy(error);
    });
    body.once('close', () => {
      if (body.readableEnded) return;
      bodyFailure ??= new ApiError(
        ErrorCode.invalidRequest,
        'the client closed the connection before the end of the upload',
        { hint: 'send the whole body; nothing of a cut-short upload is kept' },
      );
      source.destroy(bodyFailure);
    });
    const interrupted = new Error(`sandbox ${id} is pausing, stopping or being deleted`);
    return this.withTransfer(id, caller, 'upload', async (fs, transfer) => {
      transfer.signal.addEventListener('abort', () => {
        body.unpipe(source);
        source.destroy(interrupted);
      });
      try {
        return await fn(fs, source);
      } catch (error) {
        throw bodyFailure ?? error;
      } finally {
        transfer.end();
      }
    });
  }

  /**
   * Open a download stream with `open` (a file's bytes or a directory's tar) in sandbox `id`, registered under the
   * sandbox's lock as a holder that a pause, stop or delete ends first: the stream is destroyed with an error (the
   * client sees the body cut short of its Content-Length or its chunked end) and its handles closed, so the
   * runtime can unmount at once.
   * @throws what {@link with} throws
   */
  async download<S extends Readable>(caller: Principal, id: string, open: (fs: SandboxFs) => Promise<S>): Promise<S> {
    return this.withTransfer(id, caller, 'download', async (fs, transfer) => {
      const stream = await open(fs).catch((error: unknown) => {
        transfer.end();
        throw error;
      });
      transfer.signal.addEventListener('abort', () =>
        stream.destroy(new Error(`sandbox ${id} is pausing, stopping or being deleted; the download was ended`)),
      );
      if (stream.closed) transfer.end();
      else stream.once('close', () => transfer.end());
      return stream;
    });
  }

  /**
   * {@link with}, plus a holder registered under the lock before `fn` runs: its release aborts `transfer.signal`
   * and waits until `transfer.end()` is called. A failure after the abort is `conflict` (409).
   */
  private async withTransfer<T>(
    id: string,
    caller: Principal,
    kind: 'upload' | 'download',
    fn: (fs: SandboxFs, transfer: { signal: AbortSignal; end: () => void }) => Promise<T>,
  ): Promise<T> {
    const controller = new AbortController();
    let endTransfer = (): void => undefined;
    const ended = new Promise<void>((resolve) => {
      endTransfer = resolve;
    });
    let unhold = (): void => undefined;
    const end = () => {
      unhold();
      endTransfer();
    };
    const fs = await this.open(caller, id, () => {
      unhold = this.hold(id, async () => {
        controller.abort();
        await ended;
      });
    });
    try {
      return await fn(fs, { signal: controller.signal, end });
    } catch (error) {
      end();
      if (controller.signal.aborted) {
        throw new ApiError(ErrorCode.conflict, `sandbox ${id} was paused, stopped or deleted during the ${kind}`, {
          hint:
            kind === 'upload'
              ? 'nothing was written (the partial file was removed); resume the sandbox and upload again'
              : 'resume the sandbox and download again',
          cause: error,
        });
      }
      throw mapFsError(error);
    }
  }

  /**
   * Run `fn` with the file view of sandbox `id`; file errors become API errors.
   * @throws ApiError `sandbox_not_found`, `sandbox_not_running`, or the file error's code
   */
  async with<T>(caller: Principal, id: string, fn: (fs: SandboxFs) => Promise<T>): Promise<T> {
    const fs = await this.open(caller, id);
    try {
      return await fn(fs);
    } catch (error) {
      throw mapFsError(error);
    }
  }

  /**
   * The file view of running sandbox `id`, checked (and `underLock` run) under the sandbox's lock.
   * @throws ApiError `sandbox_not_found`, `sandbox_not_running`
   */
  private async open(caller: Principal, id: string, underLock?: () => void): Promise<SandboxFs> {
    return this.deps.mutex.run(id, async () => {
      const sandbox = await this.deps.sandboxes.requireRunning(caller.tenantId, id);
      if (sandbox.state !== 'running') {
        throw new ApiError(ErrorCode.sandboxNotRunning, `sandbox ${id} is ${sandbox.state}, not running`, {
          hint: 'files are reachable while the sandbox runs',
        });
      }
      const fs = new SandboxFs(this.deps.driver.rootDir(id));
      await this.sweepOnce(id, fs);
      underLock?.();
      return fs;
    });
  }
}
