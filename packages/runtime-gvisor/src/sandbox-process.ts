import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { readFile, rm } from 'node:fs/promises';
import { constants as osConstants } from 'node:os';
import { PassThrough, type Writable } from 'node:stream';
import { finished } from 'node:stream/promises';
import type { ProcessExit, SandboxProcess } from '@burrow/runtime';
import { RuntimeError } from '@burrow/runtime';
import { tail } from './run-command.js';
import type { RunscCli } from './runsc-cli.js';

/** How often to look for the in-sandbox pid file while a process starts, in ms. */
const PID_POLL_MS = 3;
/**
 * How long output may keep flowing after the process itself exited, in ms. A background child that inherited
 * stdout/stderr keeps the pipes open; after this grace the streams end, so a call never waits for such a child.
 */
export const OUTPUT_GRACE_AFTER_EXIT_MS = 500;

/** Input of {@link startSandboxProcess}. */
export interface StartProcessInput {
  runsc: RunscCli;
  sandboxId: string;
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  user?: { uid: number; gid: number } | undefined;
  /** Files for the in-sandbox pid and runsc's log of this exec (removed after exit). */
  pidFile: string;
  logFile: string;
  signal?: AbortSignal | undefined;
}

/**
 * Start `argv` in the sandbox. Its output is buffered until read; `exited` resolves only once the caller has
 * read both output streams to their end (or, when a background child holds them open, {@link OUTPUT_GRACE_AFTER_EXIT_MS}
 * after the process exited). Started with `runsc exec`; resolves once it runs inside (its in-sandbox pid is known).
 * A missing program resolves as a process that exited with 127, like a shell.
 * @throws RuntimeError when runsc cannot start the process (sandbox not running, bad cwd)
 */
export async function startSandboxProcess(input: StartProcessInput): Promise<SandboxProcess> {
  const args = [...input.runsc.globalFlags([`--debug-log=${input.logFile}`]), 'exec', '--cwd', input.cwd];
  for (const [key, value] of Object.entries(input.env)) args.push('--env', `${key}=${value}`);
  if (input.user !== undefined) args.push('--user', `${input.user.uid}:${input.user.gid}`);
  args.push('--internal-pid-file', input.pidFile, input.sandboxId, ...input.argv);
  const child = spawn(input.runsc.runscPath, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  // Piping at once keeps the output: Node discards unread child output when the child exits.
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  // A process that exits without reading its stdin makes writes fail with EPIPE: that is not an error here.
  child.stdin.on('error', () => undefined);
  child.stdout.pipe(stdout);
  child.stderr.pipe(stderr);
  // 'exit', not 'close': a background grandchild may hold the output pipes open long after the process ended.
  const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve, reject) => {
    child.on('error', reject);
    child.on('exit', (code, signal) => resolve({ code, signal }));
  });
  closed.catch(() => undefined);
  let done = false;
  closed.then(
    () => {
      done = true;
    },
    () => {
      done = true;
    },
  );
  let pid: number | null = null;
  while (pid === null && !done) {
    pid = await readPid(input.pidFile);
    if (pid === null) await new Promise((resolve) => setTimeout(resolve, PID_POLL_MS));
  }
  if (pid === null) pid = await readPid(input.pidFile);
  const streamsEnded = Promise.all([finished(stdout), finished(stderr)]).catch(() => undefined);
  const exited = closed.then(
    async ({ code, signal }) => {
      await endOutputAfterGrace(child, [stdout, stderr], streamsEnded);
      const log = await readFile(input.logFile, 'utf8').catch(() => '');
      await rm(input.logFile, { force: true });
      await rm(input.pidFile, { force: true });
      return exitFromLog(log, code, signal);
    },
    async (error: unknown) => {
      await rm(input.logFile, { force: true });
      throw new RuntimeError('runsc exec could not start', String(error), { cause: error });
    },
  );
  if (pid === null) {
    const log = await readFile(input.logFile, 'utf8').catch(() => '');
    if (!/error finding executable|failed to load .*: permission denied/.test(log)) {
      stdout.resume();
      stderr.resume();
      await exited.catch(() => undefined);
      const cwd = log.match(/failed to find initial working directory "([^"]*)"/);
      if (cwd) {
        throw new RuntimeError(`the working directory ${cwd[1]} does not exist in the sandbox`, fatalLines(log), {
          code: 'invalid_request',
        });
      }
      throw new RuntimeError(`cannot exec in sandbox ${input.sandboxId}`, fatalLines(log));
    }
  }
  const inSandboxPid = pid;
  // gVisor starts every exec'd process as a session and process-group leader (pgid = pid, measured), so a
  // signal to the group reaches the children a shell started too. runsc can only signal one pid, so the group
  // signal is sent from inside by a second exec; `runsc kill --pid` covers a group that is already gone.
  const kill = async (signal: NodeJS.Signals): Promise<void> => {
    if (inSandboxPid === null || done) return;
    const number = osConstants.signals[signal];
    const group = await input.runsc.run([
      'exec',
      input.sandboxId,
      '/bin/sh',
      '-c',
      `kill -s ${signal.replace(/^SIG/, '')} -- -${inSandboxPid}`,
    ]);
    if (group.exitCode !== 0) await input.runsc.run(['kill', `--pid=${inSandboxPid}`, input.sandboxId, String(number)]);
  };
  if (input.signal) {
    const onAbort = (): void => {
      void kill('SIGKILL');
    };
    input.signal.addEventListener('abort', onAbort, { once: true });
    void exited.finally(() => input.signal?.removeEventListener('abort', onAbort)).catch(() => undefined);
    if (input.signal.aborted) onAbort();
  }
  return {
    stdin: child.stdin as Writable,
    stdout,
    stderr,
    kill,
    exited,
  };
}

/** Wait for both output streams to end, at most {@link OUTPUT_GRACE_AFTER_EXIT_MS}; then end them ourselves. */
async function endOutputAfterGrace(
  child: ChildProcessWithoutNullStreams,
  outputs: PassThrough[],
  streamsEnded: Promise<unknown>,
): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const grace = new Promise<'grace'>((resolve) => {
    timer = setTimeout(() => resolve('grace'), OUTPUT_GRACE_AFTER_EXIT_MS);
  });
  const first = await Promise.race([streamsEnded.then(() => 'ended' as const), grace]);
  clearTimeout(timer);
  if (first === 'ended') return;
  child.stdout.unpipe();
  child.stderr.unpipe();
  child.stdout.destroy();
  child.stderr.destroy();
  for (const out of outputs) out.end();
  await streamsEnded;
}

async function readPid(path: string): Promise<number | null> {
  const text = await readFile(path, 'utf8').catch(() => '');
  const pid = Number.parseInt(text, 10);
  return Number.isInteger(pid) && pid > 0 ? pid : null;
}

/**
 * Decode the raw wait status runsc logs as `Exiting with status: N` (Linux encoding: exit code in bits 8–15,
 * terminating signal in bits 0–6), so `exit 137` and a SIGKILL death stay distinguishable.
 */
export function exitFromLog(log: string, code: number | null, signal: NodeJS.Signals | null): ProcessExit {
  const match = log.match(/Exiting with status: (\d+)/);
  if (match?.[1] !== undefined) {
    const status = Number.parseInt(match[1], 10);
    const termSignal = status & 0x7f;
    if (termSignal === 0) return { exitCode: (status >> 8) & 0xff, signal: null };
    return { exitCode: null, signal: signalName(termSignal) };
  }
  // Like a shell: 127 for a program that is not there, 126 for one that cannot be executed (a directory, no x bit).
  if (/error finding executable/.test(log)) return { exitCode: 127, signal: null };
  if (/failed to load .*: permission denied/.test(log)) return { exitCode: 126, signal: null };
  if (signal !== null) return { exitCode: null, signal };
  return { exitCode: code ?? 128, signal: null };
}

function signalName(number: number): string {
  const entry = Object.entries(osConstants.signals).find(([, value]) => value === number);
  return entry?.[0] ?? `SIG${number}`;
}

function fatalLines(log: string): string {
  const lines = log.split('\n').filter((line) => /FATAL|error|Error/.test(line));
  return tail(lines.length > 0 ? lines.join('\n') : log, 10);
}
