/** Runs the BUILT CLI (`node packages/cli/bundle/bin.js`) as a child process and collects its output as bytes. */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const CLI_BIN = fileURLToPath(new URL('../../packages/cli/bundle/bin.js', import.meta.url));

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
  stdoutBytes: Buffer;
}

export interface CliRunOptions {
  env?: Record<string, string>;
  /** Bytes piped to stdin, which is then closed; without it stdin is /dev/null. */
  input?: string | Uint8Array;
  /** Kill the CLI after this many ms. @default 60_000 */
  timeoutMs?: number;
  /** Send this signal to the CLI once its stdout shows `afterOutput`. */
  interrupt?: { signal: NodeJS.Signals; afterOutput: string };
}

export function runCli(args: readonly string[], options: CliRunOptions = {}): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI_BIN, ...args], {
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...options.env },
      stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let interrupted = false;
    child.stdout.on('data', (chunk: Buffer) => {
      out.push(chunk);
      const interrupt = options.interrupt;
      if (interrupt !== undefined && !interrupted && Buffer.concat(out).includes(interrupt.afterOutput)) {
        interrupted = true;
        child.kill(interrupt.signal);
      }
    });
    child.stderr.on('data', (chunk: Buffer) => err.push(chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 60_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      const stdoutBytes = Buffer.concat(out);
      resolve({ code, stdoutBytes, stdout: stdoutBytes.toString('utf8'), stderr: Buffer.concat(err).toString('utf8') });
    });
    if (options.input !== undefined) child.stdin?.end(options.input);
  });
}
