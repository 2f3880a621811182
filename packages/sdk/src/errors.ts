import { ErrorCode } from '@burrow/contract/error-codes';

/**
 * Codes the SDK itself raises, next to the server's {@link ErrorCode}s. Like those, they are stable: branch on them.
 */
export const ClientErrorCode = {
  /** The server could not be reached (connection refused, DNS, TLS, reset). */
  connectionFailed: 'connection_failed',
  /** The server answered with something that does not match the contract. */
  protocolError: 'protocol_error',
  /** The caller aborted the operation through its `AbortSignal`. */
  aborted: 'aborted',
  /** A command exited non-zero (or died from a signal) and the caller asked for `check: true`. */
  commandExit: 'command_exit',
} as const;

/** One of the codes in {@link ClientErrorCode}. */
export type ClientErrorCode = (typeof ClientErrorCode)[keyof typeof ClientErrorCode];

/** Every code a {@link BurrowError} can carry: a server {@link ErrorCode} or a {@link ClientErrorCode}. */
export type BurrowErrorCode = ErrorCode | ClientErrorCode;

/** Fields of a {@link BurrowError}, as taken by its constructor. */
export interface BurrowErrorInit {
  /** Stable error code. */
  code: BurrowErrorCode;
  /** What to do about it, when known. */
  hint?: string | undefined;
  /** Id of the failed request, as logged by the server (empty for errors raised by the SDK). @default '' */
  requestId?: string | undefined;
  /** HTTP status of the response, or 0 when there was none. @default 0 */
  status?: number | undefined;
  /** Structured details from the server (for example the fields that failed validation). */
  details?: unknown;
  /** The underlying error (network failure, parse failure). */
  cause?: unknown;
}

/**
 * Base class of every error the SDK throws. Branch on {@link BurrowError.code} (stable) rather than on the message.
 *
 * @example
 * ```ts
 * try {
 *   await Sandbox.get('sbx_00000000000000000000');
 * } catch (err) {
 *   if (err instanceof BurrowError) console.error(err.code, err.message, err.hint);
 * }
 * ```
 */
export class BurrowError extends Error {
  /** Stable error code (see {@link ErrorCode} and {@link ClientErrorCode}). */
  readonly code: BurrowErrorCode;
  /** What to do about it, when known. */
  readonly hint: string | undefined;
  /** Id of the failed request, for the server log; empty when the SDK raised the error itself. */
  readonly requestId: string;
  /** HTTP status of the response, or 0 when there was none. */
  readonly status: number;
  /** Structured details from the server, if any. */
  readonly details: unknown;

  constructor(message: string, init: BurrowErrorInit) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.code = init.code;
    this.hint = init.hint;
    this.requestId = init.requestId ?? '';
    this.status = init.status ?? 0;
    this.details = init.details;
  }
}

/** The API key is missing, unknown or revoked (`unauthorized`). */
export class AuthenticationError extends BurrowError {}
/** The API key may not do this (`forbidden`), for example a member key managing keys. */
export class PermissionDeniedError extends BurrowError {}
/** The request failed validation (`invalid_request`, `invalid_json`, `invalid_path`, `payload_too_large`). */
export class InvalidRequestError extends BurrowError {}
/** No route matches: usually an SDK and server version mismatch (`route_not_found`). */
export class RouteNotFoundError extends BurrowError {}
/** No sandbox with this id exists for the caller's tenant (`sandbox_not_found`). */
export class SandboxNotFoundError extends BurrowError {}
/** The sandbox is not running (`sandbox_not_running`). */
export class SandboxNotRunningError extends BurrowError {}
/** No ready template with this name exists (`template_not_found`). */
export class TemplateNotFoundError extends BurrowError {}
/** A template build failed (`template_build_failed`). */
export class TemplateBuildError extends BurrowError {}
/** No API key with this id exists for the caller's tenant (`key_not_found`). */
export class KeyNotFoundError extends BurrowError {}
/** The path does not exist in the sandbox (`file_not_found`). */
export class FileNotFoundError extends BurrowError {}
/**
 * The path has the wrong type or the operation conflicts with what is there
 * (`is_a_directory`, `not_a_directory`, `file_exists`, `directory_not_empty`, `no_space`).
 */
export class FileSystemError extends BurrowError {}
/** The resource already exists or is busy (`conflict`, `template_exists`). */
export class ConflictError extends BurrowError {}
/** The server or its runtime failed (`runtime_error`, `internal_error`); the request id finds it in the server log. */
export class ServerError extends BurrowError {}
/** No background command with this id in the sandbox (`command_not_found`). */
export class CommandNotFoundError extends BurrowError {}
/** The command's `user` is not in the sandbox's `/etc/passwd` (`user_not_found`). */
export class UserNotFoundError extends BurrowError {}
/** The server could not be reached; `cause` holds the network error. */
export class ConnectionError extends BurrowError {}
/** The server's answer does not match the contract; usually an SDK and server version mismatch. */
export class ProtocolError extends BurrowError {}
/** The operation was aborted through the caller's `AbortSignal`; `cause` holds the signal's reason. */
export class AbortedError extends BurrowError {}
/** The sandbox is paused and was created with `autoResume: false`: call `sandbox.resume()` first. */
export class SandboxPausedError extends BurrowError {}
/** No snapshot with this name or id. */
export class SnapshotNotFoundError extends BurrowError {}
/** A checkpoint image or snapshot failed verification (altered, truncated, or from another runtime version). */
export class CheckpointRejectedError extends BurrowError {}
/**
 * The server's S3 snapshot store failed: down (`snapshot_store_unavailable`, 503), refused the server's credentials
 * (`snapshot_store_denied`, 502) or its bucket does not exist (`snapshot_store_bucket_missing`, 502). The operator
 * fixes the store; a snapshot that was not taken can be taken again.
 */
export class SnapshotStoreError extends BurrowError {}
/** A stored chunk of the snapshot is missing or altered (`snapshot_corrupt`): it is not restored. */
export class SnapshotCorruptError extends BurrowError {}
/** No bucket credentials of this name (`bucket_not_found`) or they exist already (`bucket_exists`). */
export class BucketNotFoundError extends BurrowError {}
/**
 * A named bucket failed: its service refused the credentials (`bucket_denied`), the bucket is missing
 * (`bucket_missing`), the endpoint is down (`bucket_unavailable`), or an object's bytes did not match their
 * checksum (`bucket_checksum_mismatch`). `code` says which; nothing half-written is kept.
 */
export class BucketError extends BurrowError {}
/**
 * A pause, fork or memory snapshot is refused by the sandbox's own state, which the runtime cannot save
 * (`deleted_file_open`: a process keeps a deleted file open or works in a deleted directory outside /tmp;
 * `host_socket_open`: a process holds a host socket; HTTP 409). `details.blockers` name the process and path; the
 * sandbox keeps running.
 */
export class CheckpointBlockedError extends BurrowError {}
/** The server's runtime cannot do this (for example pause without checkpoint support). */
export class UnsupportedError extends BurrowError {}
/** A tenant quota would be exceeded (`quota_exceeded`, HTTP 429); `details` says which limit; see `quota()`. */
export class QuotaExceededError extends BurrowError {}
/** No webhook with this id exists for the caller's tenant (`webhook_not_found`). */
export class WebhookNotFoundError extends BurrowError {}
/**
 * The webhook URL is, or resolves to, a loopback, private, link-local or reserved address, which the server does
 * not send to unless its operator allows it (`webhook_url_forbidden`, HTTP 422).
 */
export class WebhookUrlForbiddenError extends BurrowError {}
/** The sandbox is quarantined: exec, writes, commands, fork, reset and delete need an admin key until released. */
export class SandboxQuarantinedError extends BurrowError {}

/**
 * The request's body arrived slower than the server's minimum rate, or a JSON body took too long
 * (`request_timeout`, HTTP 408); the server closed the connection.
 */
export class RequestTimeoutError extends BurrowError {}
/**
 * Too many connections from this address or requests in flight for this key at once (`rate_limited`, HTTP 429);
 * retry after a second or two.
 */
export class RateLimitedError extends BurrowError {}

/**
 * A preview URL refused its caller (`preview_access_denied`, `preview_link_expired`, `preview_link_invalid`, HTTP
 * 401): send the access token, or mint a new signed URL with `sandbox.ports.url(port, { signed: true })`.
 */
export class PreviewAccessError extends BurrowError {}
/** Nothing listens on the sandbox port a preview URL names (`port_not_listening`, HTTP 502). */
export class PortNotListeningError extends BurrowError {}
/** No secret with this name (`secret_not_found`), or a create names one the tenant does not have (`unknown_secret`). */
export class SecretNotFoundError extends BurrowError {}
/** No volume with this name or id exists for the caller's tenant (`volume_not_found`, HTTP 404). */
export class VolumeNotFoundError extends BurrowError {}

type BurrowErrorClass = new (message: string, init: BurrowErrorInit) => BurrowError;

const CLASS_BY_CODE: { readonly [K in ErrorCode]: BurrowErrorClass } = {
  invalid_request: InvalidRequestError,
  invalid_json: InvalidRequestError,
  payload_too_large: InvalidRequestError,
  invalid_path: InvalidRequestError,
  unauthorized: AuthenticationError,
  key_expired: AuthenticationError,
  forbidden: PermissionDeniedError,
  route_not_found: RouteNotFoundError,
  sandbox_not_found: SandboxNotFoundError,
  sandbox_not_running: SandboxNotRunningError,
  template_not_found: TemplateNotFoundError,
  template_exists: ConflictError,
  template_build_failed: TemplateBuildError,
  key_not_found: KeyNotFoundError,
  file_not_found: FileNotFoundError,
  is_a_directory: FileSystemError,
  not_a_directory: FileSystemError,
  file_exists: FileSystemError,
  directory_not_empty: FileSystemError,
  no_space: FileSystemError,
  // The exec paths turn exec_timeout into CommandTimeoutError with the partial result; elsewhere it is generic.
  exec_timeout: BurrowError,
  command_not_found: CommandNotFoundError,
  user_not_found: UserNotFoundError,
  runtime_error: ServerError,
  conflict: ConflictError,
  sandbox_paused: SandboxPausedError,
  snapshot_not_found: SnapshotNotFoundError,
  snapshot_exists: ConflictError,
  checkpoint_rejected: CheckpointRejectedError,
  snapshot_store_unavailable: SnapshotStoreError,
  snapshot_store_denied: SnapshotStoreError,
  snapshot_store_bucket_missing: SnapshotStoreError,
  snapshot_corrupt: SnapshotCorruptError,
  bucket_not_found: BucketNotFoundError,
  bucket_exists: ConflictError,
  bucket_denied: BucketError,
  bucket_missing: BucketError,
  bucket_unavailable: BucketError,
  bucket_checksum_mismatch: BucketError,
  deleted_file_open: CheckpointBlockedError,
  host_socket_open: CheckpointBlockedError,
  unsupported: UnsupportedError,
  quota_exceeded: QuotaExceededError,
  policy_limit_exceeded: InvalidRequestError,
  webhook_not_found: WebhookNotFoundError,
  secret_not_found: SecretNotFoundError,
  unknown_secret: SecretNotFoundError,
  secret_too_large: InvalidRequestError,
  webhook_url_forbidden: WebhookUrlForbiddenError,
  sandbox_quarantined: SandboxQuarantinedError,
  request_timeout: RequestTimeoutError,
  rate_limited: RateLimitedError,
  preview_access_denied: PreviewAccessError,
  preview_link_expired: PreviewAccessError,
  preview_link_invalid: PreviewAccessError,
  port_not_listening: PortNotListeningError,
  volume_not_found: VolumeNotFoundError,
  volume_exists: ConflictError,
  volume_in_use: ConflictError,
  volume_mount_invalid: InvalidRequestError,
  volume_mount_conflict: ConflictError,
  volume_shrink_refused: InvalidRequestError,
  internal_error: ServerError,
};

const KNOWN_CODES = new Set<string>(Object.values(ErrorCode));

/** Whether a string is one of the server's {@link ErrorCode}s. */
export function isServerErrorCode(code: string): code is ErrorCode {
  return KNOWN_CODES.has(code);
}

/** The wire error object (the inside of the envelope), loosely typed so that unknown codes still map. */
export interface WireError {
  code: string;
  message: string;
  hint?: string | undefined;
  details?: unknown;
  requestId?: string | undefined;
}

/**
 * Builds the right {@link BurrowError} subclass from a server error object.
 * Unknown codes (a newer server) become a plain `BurrowError` with code `internal_error` and the original in `details`.
 */
export function errorFromWire(error: WireError, status: number): BurrowError {
  const init: BurrowErrorInit = {
    code: isServerErrorCode(error.code) ? error.code : ErrorCode.internal,
    hint: error.hint,
    requestId: error.requestId,
    status,
    details: isServerErrorCode(error.code) ? error.details : { code: error.code, details: error.details },
  };
  const Class = isServerErrorCode(error.code) ? CLASS_BY_CODE[error.code] : BurrowError;
  return new Class(error.message, init);
}
