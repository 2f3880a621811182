import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { createInterface } from 'node:readline';

/** Result of {@link runCommand}. Output is decoded as UTF-8; it is diagnostic text, not user data. */
export interface CommandResult {
  exitCode: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
}

/** Options of {@link runCommand}. */
export interface RunCommandOptions {
  /** Cancels the command with SIGKILL. */
  signal?: AbortSignal | undefined;
  /** Receives stdout and stderr line by line as they arrive. */
  onLine?: ((line: string) => void) | undefined;
  /** Kill the command after this many ms. @default undefined (no limit) */
  timeoutMs?: number | undefined;
  /** Bytes written to stdin, which is then closed. @default nothing (stdin is /dev/null) */
  input?: string | undefined;
  /** Keep at most this many characters of each stream (the tail). @default 65_536 */
  maxOutputChars?: number | undefined;
  /**
   * Send stdout and stderr to this file (appended) instead of pipes, and finish when the program exits. For
   * programs that hand their stdio to long-lived children (`runsc create`), whose pipes would never close.
   */
  outputFile?: string | undefined;
}

/**
 * Run a host program to completion and collect its output. Never throws for a non-zero exit.
 * @throws Error if the program cannot be started or the signal aborts it
 */
export function runCommand(
  file: string,
  args: readonly string[],
  options: RunCommandOptions = {},
): Promise<CommandResult> {
  const maxChars = options.maxOutputChars ?? 65_536;
  return new Promise((resolve, reject) => {
    if (options.signal?.aborted) {
      reject(abortError(options.signal));
      return;
    }
    const outputFd = options.outputFile === undefined ? undefined : openSync(options.outputFile, 'a');
    const output = outputFd ?? 'pipe';
    const child = spawn(file, args, { stdio: [options.input === undefined ? 'ignore' : 'pipe', output, output] });
    if (outputFd !== undefined) closeSync(outputFd);
    let stdout = '';
    let stderr = '';
    let aborted = false;
    const keep = (acc: string, chunk: string): string => {
      const next = acc + chunk;
      return next.length > maxChars ? next.slice(next.length - maxChars) : next;
    };
    const onAbort = (): void => {
      aborted = true;
      child.kill('SIGKILL');
    };
    options.signal?.addEventListener('abort', onAbort, { once: true });
    const timer =
      options.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            stderr = keep(stderr, `\n[killed after ${options.timeoutMs} ms]`);
            child.kill('SIGKILL');
          }, options.timeoutMs);
    child.stdout?.setEncoding('utf8');
    child.stderr?.setEncoding('utf8');
    if (options.onLine) {
      const onLine = options.onLine;
      if (child.stdout) createInterface({ input: child.stdout }).on('line', onLine);
      if (child.stderr) createInterface({ input: child.stderr }).on('line', onLine);
    }
    child.stdout?.on('data', (chunk: string) => {
      stdout = keep(stdout, chunk);
    });
    child.stderr?.on('data', (chunk: string) => {
      stderr = keep(stderr, chunk);
    });
    if (options.input !== undefined) child.stdin?.end(options.input);
    child.on('error', (error) => {
      if (timer) clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      reject(error);
    });
    child.on(outputFd === undefined ? 'close' : 'exit', (exitCode: number | null, signal: NodeJS.Signals | null) => {
      if (timer) clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      if (aborted && options.signal) reject(abortError(options.signal));
      else resolve({ exitCode, signal, stdout, stderr });
    });
  });
}

/** The error to throw when an AbortSignal fired. */
export function abortError(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new Error('aborted', { cause: signal.reason });
}

/** Last `maxLines` lines of a text, for error details. */
export function tail(text: string, maxLines = 20): string {
  const lines = text.trimEnd().split('\n');
  return lines.slice(Math.max(0, lines.length - maxLines)).join('\n');
}
