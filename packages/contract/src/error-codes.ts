/**
 * Stable error codes carried by every error response. Clients branch on these, never on messages.
 * Adding a code without an HTTP status in {@link ERROR_HTTP_STATUS} does not compile.
 */
export const ErrorCode = {
  /** The request body, query or path failed validation. */
  invalidRequest: 'invalid_request',
  /** The body is not valid JSON (or not the declared content type). */
  invalidJson: 'invalid_json',
  /** The body exceeds the server's size limit. */
  payloadTooLarge: 'payload_too_large',
  /** No API key, or an unknown or revoked one. */
  unauthorized: 'unauthorized',
  /** The API key passed its expiry (`expiresAt`): ask whoever issued it for a new one. */
  keyExpired: 'key_expired',
  /**
   * The key is valid but may not do this: a non-admin key managing keys, a viewer key changing something, a key
   * without the route's scope (`details.requiredScope`), or a key restricted to one sandbox reaching past it.
   */
  forbidden: 'forbidden',
  /** No route matches the method and path. */
  routeNotFound: 'route_not_found',
  /** No sandbox with this id exists for the caller's tenant. */
  sandboxNotFound: 'sandbox_not_found',
  /** No template with this name exists (or it is not ready). */
  templateNotFound: 'template_not_found',
  /** A template with this name already exists. */
  templateExists: 'template_exists',
  /** A template build failed. */
  templateBuildFailed: 'template_build_failed',
  /** No API key with this id exists for the caller's tenant. */
  keyNotFound: 'key_not_found',
  /** The sandbox is not in a state that allows this operation (for example exec on a deleting sandbox). */
  sandboxNotRunning: 'sandbox_not_running',
  /** The path does not exist in the sandbox. */
  fileNotFound: 'file_not_found',
  /** The path names a directory where a file was expected. */
  isADirectory: 'is_a_directory',
  /** A path component is not a directory. */
  notADirectory: 'not_a_directory',
  /** The target already exists. */
  fileExists: 'file_exists',
  /** The directory is not empty and `recursive` was not set. */
  directoryNotEmpty: 'directory_not_empty',
  /** The path is malformed (NUL byte, too long, empty) or resolves outside the sandbox root. */
  invalidPath: 'invalid_path',
  /** The sandbox disk is full. */
  noSpace: 'no_space',
  /** The command ran past its `timeoutMs` and was killed. */
  execTimeout: 'exec_timeout',
  /** No background command with this id exists in the sandbox. */
  commandNotFound: 'command_not_found',
  /** The `user` of a command is not in the sandbox's `/etc/passwd`. */
  userNotFound: 'user_not_found',
  /** The runtime failed (runsc error, host resource exhausted). */
  runtimeError: 'runtime_error',
  /** A conflicting operation is in progress on this resource. */
  conflict: 'conflict',
  /** The sandbox is paused and was created with `autoResume: false`: resume it first. */
  sandboxPaused: 'sandbox_paused',
  /** No snapshot with this name or id exists for the caller's tenant. */
  snapshotNotFound: 'snapshot_not_found',
  /** A snapshot with this name already exists. */
  snapshotExists: 'snapshot_exists',
  /** A checkpoint image or snapshot failed verification (altered, truncated, or from another runtime version). */
  checkpointRejected: 'checkpoint_rejected',
  /**
   * The S3 snapshot store did not answer (connection refused, timeout, a 5xx): a durable snapshot is not taken, a
   * restore of a snapshot that is not cached locally cannot start. Retry once the store is up.
   */
  snapshotStoreUnavailable: 'snapshot_store_unavailable',
  /** The S3 snapshot store refused the server's credentials (wrong key, signature, or no access to the prefix). */
  snapshotStoreDenied: 'snapshot_store_denied',
  /** The bucket named in the server's snapshot store setting does not exist. */
  snapshotStoreBucketMissing: 'snapshot_store_bucket_missing',
  /**
   * A chunk of a snapshot in the S3 store is missing or its bytes do not match their sha256: the restore is
   * refused and nothing is started from it.
   */
  snapshotCorrupt: 'snapshot_corrupt',
  /** No bucket credentials of this name exist for the caller's tenant (`burrow buckets list`). */
  bucketNotFound: 'bucket_not_found',
  /** Bucket credentials of this name exist already for the caller's tenant. */
  bucketExists: 'bucket_exists',
  /** The S3 service refused the named bucket's credentials (wrong key or secret, or no access to the prefix). */
  bucketDenied: 'bucket_denied',
  /** The bucket named in the credentials does not exist at their endpoint. */
  bucketMissing: 'bucket_missing',
  /** The bucket's endpoint did not answer (refused, timeout, a 5xx); nothing was changed, retry once it is up. */
  bucketUnavailable: 'bucket_unavailable',
  /** An object's bytes did not match its checksum during a sync; the file was not written. */
  bucketChecksumMismatch: 'bucket_checksum_mismatch',
  /**
   * A pause, fork or memory snapshot is refused: a process in the sandbox keeps a deleted file open or works in a
   * deleted directory outside `/tmp`, which the runtime cannot save. `details.blockers` name the process and path;
   * the sandbox keeps running.
   */
  deletedFileOpen: 'deleted_file_open',
  /**
   * A pause, fork or memory snapshot is refused: a process in the sandbox holds a host socket (a connection to a
   * host socket, or the output of a command that ran outside the exec agent), which the runtime cannot save;
   * `details.blockers` name the processes when they are known; the sandbox keeps running.
   */
  hostSocketOpen: 'host_socket_open',
  /** The runtime lacks the capability this call needs (for example `checkpoint`). */
  unsupported: 'unsupported',
  /** The sandbox is quarantined: exec, writes, commands, fork, reset and delete need an admin key until it is released. */
  sandboxQuarantined: 'sandbox_quarantined',
  /** A tenant quota (running, sandboxes, disk bytes, snapshots) would be exceeded; `details` names which. */
  quotaExceeded: 'quota_exceeded',
  /** A create request asks for a lifecycle policy beyond the tenant's limit (for example a `maxAgeMs` above it); `details` names it. */
  policyLimitExceeded: 'policy_limit_exceeded',
  /** No webhook with this id exists for the caller's tenant. */
  webhookNotFound: 'webhook_not_found',
  /**
   * A webhook URL names (or its host resolves to) a loopback, private, link-local or otherwise internal address,
   * which this server does not send to unless its operator allows it (`BURROW_WEBHOOK_ALLOW_PRIVATE=1`).
   */
  webhookUrlForbidden: 'webhook_url_forbidden',
  /**
   * The request did not arrive in time: its body came slower than the server's minimum rate
   * (`BURROW_HTTP_MIN_BODY_BYTES_PER_SEC` over `BURROW_HTTP_BODY_RATE_WINDOW_MS`), or a JSON body took longer than
   * `BURROW_HTTP_REQUEST_TIMEOUT_MS`. The connection is closed after this answer.
   */
  requestTimeout: 'request_timeout',
  /**
   * Too many connections from this address, or requests in flight for this key, at once
   * (`BURROW_HTTP_MAX_CONNECTIONS_PER_ADDRESS`, `BURROW_HTTP_MAX_REQUESTS_PER_KEY`); retry after `Retry-After` seconds.
   */
  rateLimited: 'rate_limited',
  /**
   * A preview URL of a private port was requested without the sandbox's access token (header
   * `X-Burrow-Access-Token`) or a valid signed URL's cookie, or with a wrong token.
   */
  previewAccessDenied: 'preview_access_denied',
  /** A signed preview URL is past its expiry: mint a new one (`burrow ports url ID PORT --signed`). */
  previewLinkExpired: 'preview_link_expired',
  /** A signed preview URL's signature does not match (altered, or for another sandbox, port or server). */
  previewLinkInvalid: 'preview_link_invalid',
  /** Nothing inside the sandbox accepts connections on the preview URL's port (or it does not answer in time). */
  portNotListening: 'port_not_listening',
  /** No secret with this name exists for the caller's tenant (secrets routes). */
  secretNotFound: 'secret_not_found',
  /** A create names a secret that does not exist for the caller's tenant: set it first (`burrow secrets set`). */
  unknownSecret: 'unknown_secret',
  /** A secret value is longer than 64 KiB of UTF-8. */
  secretTooLarge: 'secret_too_large',
  /** No volume with this name or id exists for the caller's tenant (another tenant's answers the same). */
  volumeNotFound: 'volume_not_found',
  /** A volume with this name already exists for the tenant. */
  volumeExists: 'volume_exists',
  /**
   * The volume is mounted by a sandbox that is not stopped or paused (delete, even with `force`), or by any sandbox
   * (delete without `force`, a grow on a host that cannot grow a mounted filesystem); `details.sandboxIds` names them.
   */
  volumeInUse: 'volume_in_use',
  /**
   * A mount of a sandbox's `volumes` is malformed: a path that is not absolute, overlaps another mount, or lies in
   * `/proc`, `/sys`, `/dev`, `/tmp` or Burrow's own `/.burrow*`; `details.path` names it.
   */
  volumeMountInvalid: 'volume_mount_invalid',
  /**
   * A second read-write mount of a volume that is not `shared` (another sandbox or this request already mounts it
   * read-write), or a read-write mount of a volume snapshot; `details` names the volume and the holder.
   */
  volumeMountConflict: 'volume_mount_conflict',
  /** A resize asks for less than the volume's size: volumes only grow. */
  volumeShrinkRefused: 'volume_shrink_refused',
  /** Anything unexpected; the server log carries the details under the request id. */
  internal: 'internal_error',
} as const;

/** One of the stable error code strings in {@link ErrorCode}. */
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** HTTP status for each error code. Typed so that a new code without a status fails to compile. */
export const ERROR_HTTP_STATUS: { readonly [K in ErrorCode]: number } = {
  invalid_request: 400,
  invalid_json: 400,
  payload_too_large: 413,
  unauthorized: 401,
  key_expired: 401,
  forbidden: 403,
  route_not_found: 404,
  sandbox_not_found: 404,
  template_not_found: 404,
  template_exists: 409,
  template_build_failed: 422,
  key_not_found: 404,
  sandbox_not_running: 409,
  file_not_found: 404,
  is_a_directory: 400,
  not_a_directory: 400,
  file_exists: 409,
  directory_not_empty: 409,
  invalid_path: 400,
  no_space: 507,
  exec_timeout: 408,
  command_not_found: 404,
  user_not_found: 400,
  runtime_error: 500,
  conflict: 409,
  sandbox_paused: 409,
  snapshot_not_found: 404,
  snapshot_exists: 409,
  checkpoint_rejected: 422,
  snapshot_store_unavailable: 503,
  snapshot_store_denied: 502,
  snapshot_store_bucket_missing: 502,
  snapshot_corrupt: 422,
  bucket_not_found: 404,
  bucket_exists: 409,
  bucket_denied: 502,
  bucket_missing: 502,
  bucket_unavailable: 503,
  bucket_checksum_mismatch: 502,
  deleted_file_open: 409,
  host_socket_open: 409,
  unsupported: 501,
  sandbox_quarantined: 409,
  quota_exceeded: 429,
  policy_limit_exceeded: 400,
  webhook_not_found: 404,
  webhook_url_forbidden: 422,
  request_timeout: 408,
  rate_limited: 429,
  preview_access_denied: 401,
  preview_link_expired: 401,
  preview_link_invalid: 401,
  port_not_listening: 502,
  secret_not_found: 404,
  unknown_secret: 400,
  secret_too_large: 413,
  volume_not_found: 404,
  volume_exists: 409,
  volume_in_use: 409,
  volume_mount_invalid: 400,
  volume_mount_conflict: 409,
  volume_shrink_refused: 400,
  internal_error: 500,
};
