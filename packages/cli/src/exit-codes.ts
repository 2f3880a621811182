import { constants } from 'node:os';
import { ERROR_HTTP_STATUS } from '@burrow/contract/error-codes';
import type { ExitInfo } from '@burrow/sdk';
import { BurrowError } from '@burrow/sdk/errors';
import { CommanderError } from 'commander';

/** Exit codes of `burrow` (besides `burrow exec`, which exits with the remote command's code). */
export const ExitCode = {
  ok: 0,
  /** Anything not listed below. */
  failure: 1,
  /** Bad usage or a request the server rejected as invalid. */
  usage: 2,
  /** What the call names does not exist (any error the API answers with HTTP 404). */
  notFound: 3,
  /** No key, a bad key, or a key without the right. */
  auth: 4,
  /** The command ran past its timeout (as `timeout(1)`). */
  timeout: 124,
} as const;

/** A mistake in how the CLI was called, found before any request. */
export class UsageError extends Error {
  readonly hint: string | undefined;

  constructor(message: string, hint?: string) {
    super(message);
    this.name = 'UsageError';
    this.hint = hint;
  }
}

const USAGE_CODES = new Set(['invalid_request', 'invalid_json', 'invalid_path', 'payload_too_large']);
/** Every error code the API answers with 404: a sandbox, template, snapshot, key, file, command, webhook… */
const NOT_FOUND_CODES = new Set(
  Object.entries(ERROR_HTTP_STATUS)
    .filter(([, status]) => status === 404)
    .map(([code]) => code),
);
const AUTH_CODES = new Set(['unauthorized', 'key_expired', 'forbidden']);

/** The process exit code for an error thrown by a CLI command. */
export function exitCodeForError(err: unknown): number {
  if (err instanceof UsageError) return ExitCode.usage;
  if (err instanceof CommanderError) return err.exitCode === 0 ? ExitCode.ok : ExitCode.usage;
  if (!(err instanceof BurrowError)) return ExitCode.failure;
  if (USAGE_CODES.has(err.code)) return ExitCode.usage;
  if (NOT_FOUND_CODES.has(err.code)) return ExitCode.notFound;
  if (AUTH_CODES.has(err.code)) return ExitCode.auth;
  if (err.code === 'exec_timeout') return ExitCode.timeout;
  return ExitCode.failure;
}

/** The exit code `burrow exec` passes on: the remote code, 128+n for a signal, 124 for a timeout. */
export function exitCodeForExit(exit: Pick<ExitInfo, 'exitCode' | 'signal' | 'timedOut'>): number {
  if (exit.timedOut) return ExitCode.timeout;
  if (exit.signal !== null) {
    const number = (constants.signals as Record<string, number | undefined>)[exit.signal];
    return number === undefined ? ExitCode.failure : 128 + number;
  }
  return exit.exitCode ?? ExitCode.failure;
}
