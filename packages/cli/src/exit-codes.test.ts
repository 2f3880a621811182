import {
  AuthenticationError,
  BurrowError,
  ConnectionError,
  FileNotFoundError,
  InvalidRequestError,
  SandboxNotFoundError,
} from '@burrow/sdk';
import { CommanderError } from 'commander';
import { describe, expect, it } from 'vitest';
import { ExitCode, exitCodeForError, exitCodeForExit, UsageError } from './exit-codes.js';

describe('exitCodeForError', () => {
  it.each([
    [new UsageError('bad'), ExitCode.usage],
    [new CommanderError(1, 'commander.unknownOption', 'x'), ExitCode.usage],
    [new CommanderError(0, 'commander.helpDisplayed', 'x'), ExitCode.ok],
    [new InvalidRequestError('x', { code: 'invalid_request' }), ExitCode.usage],
    [new SandboxNotFoundError('x', { code: 'sandbox_not_found' }), ExitCode.notFound],
    [new FileNotFoundError('x', { code: 'file_not_found' }), ExitCode.notFound],
    [new BurrowError('x', { code: 'snapshot_not_found' }), ExitCode.notFound],
    [new BurrowError('x', { code: 'webhook_not_found' }), ExitCode.notFound],
    [new BurrowError('x', { code: 'command_not_found' }), ExitCode.notFound],
    [new AuthenticationError('x', { code: 'unauthorized' }), ExitCode.auth],
    [new BurrowError('x', { code: 'forbidden' }), ExitCode.auth],
    [new BurrowError('x', { code: 'exec_timeout' }), ExitCode.timeout],
    [new ConnectionError('x', { code: 'connection_failed' }), ExitCode.failure],
    [new BurrowError('x', { code: 'internal_error' }), ExitCode.failure],
    [new Error('boom'), ExitCode.failure],
  ])('%s → %i', (err, code) => {
    expect(exitCodeForError(err)).toBe(code);
  });
});

describe('exitCodeForExit', () => {
  it('passes the remote exit code on', () => {
    expect(exitCodeForExit({ exitCode: 0, signal: null, timedOut: false })).toBe(0);
    expect(exitCodeForExit({ exitCode: 3, signal: null, timedOut: false })).toBe(3);
  });

  it('maps a signal death to 128+n', () => {
    expect(exitCodeForExit({ exitCode: null, signal: 'SIGKILL', timedOut: false })).toBe(137);
    expect(exitCodeForExit({ exitCode: null, signal: 'SIGTERM', timedOut: false })).toBe(143);
    expect(exitCodeForExit({ exitCode: null, signal: 'SIGNOTREAL', timedOut: false })).toBe(1);
  });

  it('maps a timeout to 124 whatever killed it', () => {
    expect(exitCodeForExit({ exitCode: null, signal: 'SIGKILL', timedOut: true })).toBe(124);
  });
});
