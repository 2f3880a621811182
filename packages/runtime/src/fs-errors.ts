import type { ErrorCode } from '@burrow/contract';

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

/** Run a file step on `path`, turning its failure into an {@link FsError}. */
export async function guard<T>(path: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw toFsError(path, err);
  }
}

/** Map an errno to the API error code and a message that says what to do. */
export function toFsError(path: string, err: unknown): FsError {
  if (err instanceof FsError) return err;
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  const map: Record<string, [ErrorCode, string]> = {
    ENOENT: ['file_not_found', `${path} does not exist`],
    EISDIR: ['is_a_directory', `${path} is a directory`],
    ENOTDIR: ['not_a_directory', `a component of ${path} is not a directory`],
    EEXIST: ['file_exists', `${path} already exists`],
    ENOTEMPTY: ['directory_not_empty', `${path} is not empty; pass recursive to remove it with its contents`],
    ENOSPC: [
      'no_space',
      `no space left on the sandbox disk writing ${path}; free space or create the sandbox with a larger diskMiB`,
    ],
    EDQUOT: ['no_space', `disk quota exceeded writing ${path}`],
    ENAMETOOLONG: ['invalid_path', `${path} is too long`],
    ELOOP: ['invalid_path', `too many levels of symlinks in ${path}`],
    EINVAL: ['invalid_path', `invalid operation on ${path} (for example moving a directory into itself)`],
    EXDEV: ['invalid_path', `${path} cannot be moved across file systems`],
    EACCES: ['forbidden', `permission denied on ${path}`],
    EPERM: ['forbidden', `operation not permitted on ${path}`],
    EROFS: ['forbidden', `${path} is on a read-only file system (EROFS)`],
  };
  const hit = code === undefined ? undefined : map[code];
  if (hit) return new FsError(hit[0], hit[1], { cause: err });
  return new FsError('internal_error', `file operation on ${path} failed`, { cause: err });
}
