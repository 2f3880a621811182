import { once } from 'node:events';
import type { Sandbox } from '@burrow/sdk';
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
    .option('-t, --tty', 'run the command on a PTY sized like this terminal (use -it for a shell)')
    .action(async (id: string, args: string[], _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<ExecOptions>();
      const timeoutMs = options.timeout === undefined ? undefined : parsePositiveInt(options.timeout, '--timeout');
      const env = keyValueRecord(options.env, 'env');
      const sandbox = await Sandbox.get(id, connectionFor(context, options));
      if (options.tty === true) {
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
  const size = () => ({ cols: out.columns ?? 80, rows: out.rows ?? 24 });
  const handle = await sandbox.commands.run(cmd, {
    background: true,
    pty: { ...size(), term: process.env.TERM ?? 'xterm-256color' },
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
  const onResize = () => stream.resize(size());
  stdin.on('data', onData);
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
    if (raw) stdin.setRawMode(false);
    stdin.pause();
    if (stdin.isTTY !== true) stdin.destroy();
  }
}
