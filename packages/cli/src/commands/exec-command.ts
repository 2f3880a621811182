import { once } from 'node:events';
import type { ExitReason, Sandbox } from '@burrow/sdk';
import type { Command } from 'commander';
import { type CliContext, connectionFor, type GlobalOptions, loadSdk } from '../cli-context.js';
import { exitCodeForExit } from '../exit-codes.js';
import { collect, keyValueRecord, parsePositiveInt } from '../key-value-parse.js';

interface ExecOptions extends GlobalOptions {
  timeout?: string;
  env?: string[];
  cwd?: string;
  user?: string;
  interactive?: boolean;
  tty?: boolean;
}

/** What `burrow exec` runs: argv as given, or one argument with spaces through `/bin/sh -c`. */
export function commandFromArgs(args: readonly string[]): string | string[] {
  if (args.length === 1 && /\s/.test(args[0] ?? '')) return args[0] ?? '';
  return [...args];
}

/** Registers `burrow exec ID -- CMD…`; its exit code becomes the CLI's (`context.exitCode`). */
export function registerExecCommand(program: Command, context: CliContext & { exitCode: number }): void {
  program
    .command('exec')
    .description(
      'run a command in a sandbox, streaming its output; exits with its exit code (128+n for signal n, 124 on timeout)',
    )
    .argument('<id>', 'sandbox id')
    .argument('<cmd...>', 'command and arguments (after --); one argument with spaces runs through /bin/sh -c')
    .option('--timeout <ms>', 'kill the command after this many ms (default: 60000)')
    .option('--env <K=V>', 'environment variable (repeatable)', collect)
    .option('--cwd <dir>', 'working directory (default: the sandbox cwd)')
    .option('--user <name|uid>', 'user the command runs as (default: root)')
    .option('-i, --interactive', 'with -t: forward this terminal to the command')
    .option(
      '-t, --tty',
      'run the command on a PTY sized like this terminal (use -it for a shell); without a terminal on stdin it runs without a PTY, as ssh -t does',
    )
    .action(async (id: string, args: string[], _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<ExecOptions>();
      const timeoutMs = options.timeout === undefined ? undefined : parsePositiveInt(options.timeout, '--timeout');
      const env = keyValueRecord(options.env, 'env');
      const sandbox = await Sandbox.get(id, connectionFor(context, options));
      // As with `ssh -t`: a PTY needs a terminal on stdin to forward. From a script, a pipe or CI the command runs
      // without one (stdin forwarded up to its end, stdout and stderr apart), so its output and exit code stay exact.
      if (options.tty === true && context.stdin.isTTY !== true) {
        context.stderr.write('note: stdin is not a terminal, so the command runs without a PTY\n');
      } else if (options.tty === true) {
        context.exitCode = await runOnPty(sandbox, commandFromArgs(args), context, {
          env,
          cwd: options.cwd,
          user: options.user,
          timeoutMs,
        });
        return;
      }
      const stream = sandbox.commands.stream(commandFromArgs(args), {
        env,
        cwd: options.cwd,
        timeoutMs,
        user: options.user,
      });

      const stdin = context.stdin;
      const onData = (chunk: Buffer) => stream.writeStdin(chunk);
      const onEnd = () => stream.closeStdin();
      if (stdin.isTTY === true) {
        stream.closeStdin();
      } else {
        stdin.on('data', onData);
        stdin.once('end', onEnd);
        stdin.once('error', onEnd);
      }
      let interrupts = 0;
      const onSignal = (signal: 'SIGINT' | 'SIGTERM') => {
        interrupts += 1;
        if (interrupts > 1) stream.close();
        else stream.kill(signal);
      };
      const onSigint = () => onSignal('SIGINT');
      const onSigterm = () => onSignal('SIGTERM');
      process.on('SIGINT', onSigint);
      process.on('SIGTERM', onSigterm);
      try {
        for await (const event of stream) {
          if (event.type === 'stdout') await write(context.stdout, event.data);
          else if (event.type === 'stderr') await write(context.stderr, event.data);
          else {
            if (event.timedOut) {
              context.stderr.write(
                `error: the command ran past its timeout (${timeoutMs ?? 60_000} ms) and was killed\nhint: pass a larger --timeout MS\n`,
              );
            }
            reportExitReason(context, event.reason);
            context.exitCode = exitCodeForExit(event);
          }
        }
      } finally {
        process.off('SIGINT', onSigint);
        process.off('SIGTERM', onSigterm);
        stdin.off('data', onData);
        stdin.off('end', onEnd);
        stdin.off('error', onEnd);
        if (stdin.isTTY !== true) stdin.destroy();
      }
    });
}

async function write(stream: NodeJS.WritableStream, data: Uint8Array): Promise<void> {
  if (!stream.write(data)) await once(stream, 'drain');
}

/**
 * `exec -it`: the command runs as a background command on a PTY sized like this terminal; this terminal goes raw
 * and is forwarded (input, resizes). Returns the exit code to exit with. Losing the connection leaves the program
 * running (`burrow ps` / `burrow logs` find it).
 */
async function runOnPty(
  sandbox: Sandbox,
  cmd: string | string[],
  context: CliContext,
  options: {
    env: Record<string, string>;
    cwd?: string | undefined;
    user?: string | undefined;
    timeoutMs?: number | undefined;
  },
): Promise<number> {
  const out = context.stdout as NodeJS.WriteStream;
  // A terminal that reports no size (0×0, as some CI terminals do) or an output that is no terminal gets 80×24.
  const size = () => ({ cols: positiveOr(out.columns, 80), rows: positiveOr(out.rows, 24) });
  const handle = await sandbox.commands.run(cmd, {
    background: true,
    pty: { ...size(), term: context.env.TERM ?? 'xterm-256color' },
    env: options.env,
    cwd: options.cwd,
    user: options.user,
    timeoutMs: options.timeoutMs,
  });
  const stream = handle.output();
  const stdin = context.stdin as NodeJS.ReadStream;
  const raw = stdin.isTTY === true && typeof stdin.setRawMode === 'function';
  if (raw) stdin.setRawMode(true);
  const onData = (chunk: Buffer) => stream.writeStdin(chunk);
  // A terminal that goes away (hang-up) ends the program's input: ^D on the PTY.
  const onEnd = () => stream.closeStdin();
  const onResize = () => stream.resize(size());
  stdin.on('data', onData);
  stdin.once('end', onEnd);
  stdin.resume();
  out.on('resize', onResize);
  try {
    for await (const event of stream) {
      if (event.type === 'stdout' || event.type === 'stderr') await write(context.stdout, event.data);
      else if (event.type === 'exit') return exitCodeForExit(event);
    }
    return 1;
  } finally {
    out.off('resize', onResize);
    stdin.off('data', onData);
    stdin.off('end', onEnd);
    if (raw) stdin.setRawMode(false);
    stdin.pause();
    if (stdin.isTTY !== true) stdin.destroy();
  }
}

/** `value` when it is a positive number, else `fallback`. */
function positiveOr(value: number | undefined, fallback: number): number {
  return value !== undefined && value > 0 ? value : fallback;
}

/** Says on stderr why the command ended when something else than the command ended it (its exit code is 137). */
function reportExitReason(context: CliContext, reason: ExitReason | null): void {
  if (reason === 'oom_killed') {
    context.stderr.write(
      'error: the command was killed: the sandbox reached its memory limit\nhint: use less memory, or create a sandbox with more (burrow sandbox create --memory MIB)\n',
    );
  } else if (reason === 'sandbox_checkpoint') {
    context.stderr.write(
      'error: the command was killed: the sandbox was paused, forked or snapshotted with its memory while it ran\nhint: run it again once the sandbox runs; background commands (SDK: background: true) survive a pause\n',
    );
  }
}
