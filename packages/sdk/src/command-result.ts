import type { ExecResult, ExitInfo } from '@burrow/contract';
import { ErrorCode } from './contract-wire.js';
import { BurrowError, ClientErrorCode, ProtocolError } from './errors.js';

/** How a command ended and what it printed. Output is kept as bytes and as UTF-8 text. */
export interface CommandResult extends ExitInfo {
  /** stdout decoded as UTF-8 (invalid sequences become U+FFFD). */
  stdout: string;
  /** stderr decoded as UTF-8 (invalid sequences become U+FFFD). */
  stderr: string;
  /** stdout exactly as the command wrote it. */
  stdoutBytes: Uint8Array;
  /** stderr exactly as the command wrote it. */
  stderrBytes: Uint8Array;
  /** True when the server dropped output past its cap (16 MiB per stream, non-streaming runs only). */
  truncated: boolean;
}

/**
 * A command ran past its `timeoutMs` and was killed (`exec_timeout`). {@link CommandTimeoutError.result} holds the
 * output up to the kill.
 */
export class CommandTimeoutError extends BurrowError {
  /** What the command printed before it was killed. */
  readonly result: CommandResult;

  constructor(
    result: CommandResult,
    timeoutMs: number | undefined,
    init: { requestId?: string; cause?: unknown } = {},
  ) {
    const limit = timeoutMs === undefined ? 'its timeout' : `timeoutMs (${timeoutMs} ms)`;
    super(`the command ran past ${limit} and was killed`, {
      code: ErrorCode.execTimeout,
      hint: 'pass a larger `timeoutMs` (CLI: --timeout MS), or run long jobs in the background',
      requestId: init.requestId,
      status: 408,
      cause: init.cause,
    });
    this.result = result;
  }
}

/** A command exited non-zero or died from a signal, and the caller passed `check: true`. */
export class CommandExitError extends BurrowError {
  /** The full result, output included. */
  readonly result: CommandResult;

  constructor(result: CommandResult) {
    const how =
      result.signal === null
        ? `exited with code ${result.exitCode}`
        : `was killed by ${result.signal}${result.reason === null ? '' : ` (${result.reason})`}`;
    const tail = result.stderr.trim().split('\n').slice(-3).join('\n');
    super(`the command ${how}${tail === '' ? '' : `: ${tail}`}`, {
      code: ClientErrorCode.commandExit,
      hint: 'leave out `check: true` to get non-zero exits as data',
    });
    this.result = result;
  }
}

/** Builds a {@link CommandResult} from the non-streaming wire result. */
export function resultFromWire(wire: ExecResult): CommandResult {
  const stdoutBytes = fromBase64Strict(wire.stdout);
  const stderrBytes = fromBase64Strict(wire.stderr);
  return {
    exitCode: wire.exitCode,
    signal: wire.signal,
    timedOut: wire.timedOut,
    reason: wire.reason ?? null,
    durationMs: wire.durationMs,
    truncated: wire.truncated,
    stdoutBytes,
    stderrBytes,
    stdout: new TextDecoder().decode(stdoutBytes),
    stderr: new TextDecoder().decode(stderrBytes),
  };
}

/** Decodes base64 into a plain `Uint8Array` (not a Buffer). */
export function fromBase64(text: string): Uint8Array {
  const buffer = Buffer.from(text, 'base64');
  return new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
}

/**
 * Decodes padded base64 that the caller did not check with `z.base64()` (its regex and `atob` over a large output
 * cost more than the decoding): a length that is not a multiple of 4, or any character outside the alphabet (which
 * `Buffer.from` would skip), makes the decoded size differ from the one the length implies.
 * @throws ProtocolError `protocol_error` when `text` is not padded base64
 */
export function fromBase64Strict(text: string): Uint8Array {
  const bytes = fromBase64(text);
  const padding = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0;
  if (text.length % 4 !== 0 || bytes.byteLength !== (text.length / 4) * 3 - padding) {
    throw new ProtocolError('the server sent output that is not base64', {
      code: ClientErrorCode.protocolError,
      hint: 'the SDK and the server are probably different versions',
    });
  }
  return bytes;
}

/** Concatenates chunks into one `Uint8Array`. */
export function concatBytes(chunks: readonly Uint8Array[]): Uint8Array {
  const total = chunks.reduce((sum, chunk) => sum + chunk.byteLength, 0);
  const out = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return out;
}
