import { ERROR_HTTP_STATUS, ErrorEnvelopeSchema } from '@burrow/contract';
import { describe, expect, test } from 'vitest';
import { ApiError } from '../util/api-error.js';
import { mapError } from './error-mapping.js';

const fastifyError = (code: string, statusCode: number) => Object.assign(new Error(code), { code, statusCode });

describe('mapError', () => {
  test.each([
    [new ApiError('sandbox_not_found', 'no sandbox x', { hint: 'h' }), 404, 'sandbox_not_found'],
    [fastifyError('FST_ERR_CTP_INVALID_JSON_BODY', 400), 400, 'invalid_json'],
    [fastifyError('FST_ERR_CTP_EMPTY_JSON_BODY', 400), 400, 'invalid_json'],
    [fastifyError('FST_ERR_CTP_BODY_TOO_LARGE', 413), 413, 'payload_too_large'],
    [fastifyError('FST_ERR_CTP_INVALID_MEDIA_TYPE', 415), 400, 'invalid_request'],
    [Object.assign(new SyntaxError('Unexpected token'), { statusCode: 400 }), 400, 'invalid_json'],
    [fastifyError('FST_SOMETHING_ELSE', 400), 400, 'invalid_request'],
    [new TypeError('boom'), 500, 'internal_error'],
    ['a string', 500, 'internal_error'],
    [null, 500, 'internal_error'],
  ])('%s → %i %s', (error, status, code) => {
    const mapped = mapError(error, 'req_1');
    expect(mapped.statusCode).toBe(status);
    expect(mapped.envelope.error.code).toBe(code);
    expect(mapped.envelope.error.requestId).toBe('req_1');
    expect(ErrorEnvelopeSchema.safeParse(mapped.envelope).success).toBe(true);
    expect(mapped.unexpected).toBe(status >= 500);
    if (code !== 'internal_error') expect(ERROR_HTTP_STATUS[mapped.envelope.error.code]).toBe(status);
  });
  test('internal errors do not leak the message', () => {
    expect(mapError(new Error('secret path /etc/x'), 'r').envelope.error.message).not.toContain('/etc/x');
  });
});
