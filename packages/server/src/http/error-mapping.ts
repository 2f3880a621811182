import type { ErrorEnvelope } from '@burrow/contract';
import { ERROR_HTTP_STATUS, ErrorCode } from '@burrow/contract';
import { hasZodFastifySchemaValidationErrors, isResponseSerializationError } from 'fastify-type-provider-zod';
import { QuotaExceededError } from '../store/quota-store.js';
import { VolumeMountTakenError } from '../store/volume-store.js';
import { ApiError } from '../util/api-error.js';

/** An error turned into the envelope and the HTTP status to answer with. */
export interface MappedError {
  statusCode: number;
  envelope: ErrorEnvelope;
  /** True for server-side failures that the log must carry with a stack. */
  unexpected: boolean;
}

const FASTIFY_CODES: Record<string, { code: ErrorCode; message: string; hint: string }> = {
  FST_ERR_CTP_INVALID_JSON_BODY: {
    code: ErrorCode.invalidJson,
    // fastify reports a `__proto__` or `constructor.prototype` key (refused against prototype pollution) the same
    // way as broken JSON, without the cause: the message names both.
    message: 'the body is not valid JSON, or it has a key named __proto__ or constructor.prototype (refused)',
    hint: 'send a JSON object with content-type application/json, without __proto__ or constructor.prototype keys',
  },
  FST_ERR_CTP_EMPTY_JSON_BODY: {
    code: ErrorCode.invalidJson,
    message: 'the body is empty but the content type says JSON',
    hint: 'send a JSON object, or no content-type header when there is no body',
  },
  FST_ERR_CTP_BODY_TOO_LARGE: {
    code: ErrorCode.payloadTooLarge,
    message: 'the body is larger than this server accepts',
    hint: 'send a smaller body; upload large files with PUT /v1/sandboxes/{id}/files/content',
  },
  FST_ERR_CTP_INVALID_MEDIA_TYPE: {
    code: ErrorCode.invalidRequest,
    message: 'this content type is not accepted here',
    hint: 'send application/json (application/octet-stream only for file contents)',
  },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: {
    code: ErrorCode.invalidRequest,
    message: 'the content-length does not match the body',
    hint: 'send a correct content-length header',
  },
};

interface ErrorLike {
  code?: unknown;
  statusCode?: unknown;
  message?: unknown;
}

/**
 * Map anything thrown while handling a request to the one error envelope.
 * @returns status, envelope and whether the error was unexpected
 */
export function mapError(error: unknown, requestId: string): MappedError {
  const envelope = (code: ErrorCode, message: string, hint?: string, details?: unknown): ErrorEnvelope => ({
    error: {
      code,
      message,
      ...(hint === undefined ? {} : { hint }),
      ...(details === undefined ? {} : { details }),
      requestId,
    },
  });
  if (error instanceof ApiError) {
    return {
      statusCode: error.statusCode,
      envelope: envelope(error.code, error.message, error.hint, error.details),
      // A full sandbox disk (507) is the caller's state, not a server fault.
      unexpected: error.statusCode >= 500 && error.code !== ErrorCode.noSpace,
    };
  }
  if (error instanceof QuotaExceededError) {
    const { limit, max, used, requested } = error.denial;
    return {
      statusCode: ERROR_HTTP_STATUS.quota_exceeded,
      envelope: envelope(
        ErrorCode.quotaExceeded,
        error.message,
        'free capacity (delete, pause or stop sandboxes, delete snapshots) or ask an admin to raise the quota; see GET /v1/quota',
        { limit, max, used, requested },
      ),
      unexpected: false,
    };
  }
  if (error instanceof VolumeMountTakenError) {
    return {
      statusCode: ERROR_HTTP_STATUS.volume_mount_conflict,
      envelope: envelope(
        ErrorCode.volumeMountConflict,
        `${error.message}; a volume that is not shared has one read-write mount at a time`,
        'mount it with readOnly: true, delete or stop the other sandbox first, or use a volume created with shared: true',
        { volumeId: error.volumeId, sandboxId: error.holderSandboxId },
      ),
      unexpected: false,
    };
  }
  if (typeof error === 'object' && error !== null && hasZodFastifySchemaValidationErrors(error)) {
    const context = (error as { validationContext?: string }).validationContext ?? 'request';
    /** fastify's validation contexts, named as a user knows them. */
    const names: Record<string, string> = {
      body: 'request body',
      params: 'path',
      querystring: 'query string',
      headers: 'headers',
    };
    const where = names[context] ?? context;
    const issues = error.validation.map((v) => ({
      path: v.instancePath,
      message: v.message ?? 'invalid',
    }));
    const first = issues[0];
    return {
      statusCode: ERROR_HTTP_STATUS.invalid_request,
      envelope: envelope(
        ErrorCode.invalidRequest,
        `the ${where} is invalid${first === undefined ? '' : `: ${first.path || '(root)'} ${first.message}`}`,
        'fix the fields listed in details and retry',
        { location: context, issues },
      ),
      unexpected: false,
    };
  }
  if (typeof error === 'object' && error !== null && isResponseSerializationError(error)) {
    return {
      statusCode: 500,
      envelope: envelope(
        ErrorCode.internal,
        'the server built a response that breaks its own contract',
        'report this with the request id',
      ),
      unexpected: true,
    };
  }
  const e = (typeof error === 'object' && error !== null ? error : {}) as ErrorLike;
  const known = typeof e.code === 'string' ? FASTIFY_CODES[e.code] : undefined;
  if (known) {
    return {
      statusCode: ERROR_HTTP_STATUS[known.code],
      envelope: envelope(known.code, known.message, known.hint),
      unexpected: false,
    };
  }
  if (error instanceof SyntaxError && e.statusCode === 400) {
    return {
      statusCode: 400,
      envelope: envelope(
        ErrorCode.invalidJson,
        'the body is not valid JSON',
        'send a JSON object with content-type application/json',
      ),
      unexpected: false,
    };
  }
  if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
    const message = typeof e.message === 'string' ? e.message : 'the request is invalid';
    return {
      statusCode: e.statusCode === 413 ? 413 : 400,
      envelope: envelope(
        e.statusCode === 413 ? ErrorCode.payloadTooLarge : ErrorCode.invalidRequest,
        message,
        'fix the request and retry',
      ),
      unexpected: false,
    };
  }
  return {
    statusCode: 500,
    envelope: envelope(
      ErrorCode.internal,
      'something went wrong on the server',
      'retry; if it persists, report the request id',
    ),
    unexpected: true,
  };
}

/**
 * The `invalid_request` for a WebSocket JSON control frame that fails its schema: the first issue (as a JSON
 * pointer and zod's message, e.g. `/request/stdin must be standard base64 …`) in the message, all in details.
 */
export function invalidControlFrame(issues: ReadonlyArray<{ path: PropertyKey[]; message: string }>): ApiError {
  const first = issues[0];
  const where = first === undefined ? '' : `: /${first.path.map(String).join('/')} ${first.message}`;
  return new ApiError('invalid_request', `not a valid control frame${where}`, {
    hint: 'fix the fields listed in details and send the frame again (docs/exec-protocol.md)',
    details: issues,
  });
}
