import { ErrorCode } from '@burrow/contract';
import { FsError } from '@burrow/runtime';
import { ApiError } from '../../util/api-error.js';
import { type ConnectCodeName, ConnectError } from './connect-protocol.js';

/** Connect code of each Burrow error code envd's clients can meet; the rest are `internal`. */
const CONNECT_CODES: Partial<Record<string, ConnectCodeName>> = {
  [ErrorCode.invalidRequest]: 'invalid_argument',
  [ErrorCode.invalidPath]: 'invalid_argument',
  [ErrorCode.isADirectory]: 'invalid_argument',
  [ErrorCode.notADirectory]: 'invalid_argument',
  [ErrorCode.directoryNotEmpty]: 'failed_precondition',
  [ErrorCode.fileNotFound]: 'not_found',
  [ErrorCode.commandNotFound]: 'not_found',
  [ErrorCode.sandboxNotFound]: 'not_found',
  [ErrorCode.userNotFound]: 'invalid_argument',
  [ErrorCode.fileExists]: 'already_exists',
  [ErrorCode.noSpace]: 'resource_exhausted',
  [ErrorCode.unauthorized]: 'unauthenticated',
  [ErrorCode.sandboxNotRunning]: 'unavailable',
  [ErrorCode.sandboxPaused]: 'unavailable',
  [ErrorCode.conflict]: 'failed_precondition',
  [ErrorCode.payloadTooLarge]: 'resource_exhausted',
};

/** Any failure of an envd call as a Connect error (Burrow's own errors keep their message). */
export function toConnectError(error: unknown): ConnectError {
  if (error instanceof ConnectError) return error;
  if (error instanceof ApiError || error instanceof FsError) {
    const hint = error instanceof ApiError && error.hint !== undefined ? ` (${error.hint})` : '';
    return new ConnectError(CONNECT_CODES[error.code] ?? 'internal', `${error.message}${hint}`);
  }
  return new ConnectError('internal', error instanceof Error ? error.message : 'internal error');
}

/** An error of E2B's control plane, sent as E2B's body `{code: <http status>, message}`. */
export class E2bError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}
