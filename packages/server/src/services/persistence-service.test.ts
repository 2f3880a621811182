import { ERROR_HTTP_STATUS } from '@burrow/contract';
import { RuntimeError } from '@burrow/runtime';
import { DeletedFileOpenError, HostSocketOpenError } from '@burrow/runtime-gvisor';
import { describe, expect, it } from 'vitest';
import { mapError } from '../http/error-mapping.js';
import { runtimeFailure } from './persistence-service.js';

describe('runtimeFailure: checkpoints the sandbox itself blocks are 409s with a stable code', () => {
  it('maps a host socket refusal (the gVisor driver error) to 409 host_socket_open with a hint', () => {
    const error = runtimeFailure(
      'pausing sandbox sbx_1 failed',
      new HostSocketOpenError('checkpoint of sbx_1 refused: a host socket', 'host_socket_open', []),
    );
    const mapped = mapError(error, 'req_1');
    expect(mapped.statusCode).toBe(409);
    expect(mapped.unexpected).toBe(false);
    expect(mapped.envelope.error).toMatchObject({
      code: 'host_socket_open',
      message: 'pausing sandbox sbx_1 failed: checkpoint of sbx_1 refused: a host socket',
      hint: expect.stringMatching(/host socket.*retry/),
      details: { blockers: [] },
    });
  });

  it('maps a deleted open file to 409 deleted_file_open naming process and path in details', () => {
    const blockers = [{ pid: 7, command: 'python3 -m pytest', path: '/root/x' }];
    const mapped = mapError(
      runtimeFailure('x', new DeletedFileOpenError('refused', 'deleted_file_open', blockers)),
      'req_2',
    );
    expect(mapped.statusCode).toBe(ERROR_HTTP_STATUS.deleted_file_open);
    expect(mapped.statusCode).toBe(409);
    expect(mapped.envelope.error).toMatchObject({ code: 'deleted_file_open', details: { blockers } });
    expect(mapped.envelope.error.hint).toMatch(/\/tmp/);
  });

  it('leaves any other runtime failure a 500 runtime_error', () => {
    expect(mapError(runtimeFailure('x', new RuntimeError('boom')), 'req_3').statusCode).toBe(500);
  });
});
