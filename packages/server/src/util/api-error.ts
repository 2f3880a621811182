import { ERROR_HTTP_STATUS, ErrorCode } from '@burrow/contract';

/** An error the API answers with its envelope: a stable code, a message, and a hint saying what to do. */
export class ApiError extends Error {
  override readonly name = 'ApiError';
  readonly code: ErrorCode;
  readonly hint: string | undefined;
  readonly details: unknown;

  constructor(code: ErrorCode, message: string, options: { hint?: string; details?: unknown; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.hint = options.hint;
    this.details = options.details;
  }

  /** HTTP status of this error's code. */
  get statusCode(): number {
    return ERROR_HTTP_STATUS[this.code];
  }
}

/** The sandbox does not exist for this tenant (answered identically for another tenant's id). */
export function sandboxNotFound(id: string): ApiError {
  return new ApiError(ErrorCode.sandboxNotFound, `no sandbox ${id}`, {
    hint: 'list your sandboxes with `burrow sandbox ls` (GET /v1/sandboxes)',
  });
}
