import { once } from 'node:events';
import type { ExecSignal } from '@burrow/sdk';
import type { Command } from 'commander';
import { type CliContext, connectionFor, formatTable, type GlobalOptions, loadSdk, printJson } from '../cli-context.js';
import { exitCodeForExit, UsageError } from '../exit-codes.js';

interface PsOptions extends GlobalOptions {
  json?: boolean;
}

interface LogsOptions extends GlobalOptions {
  follow?: boolean;
  offset?: string;
}

const SIGNALS: readonly ExecSignal[] = ['SIGINT', 'SIGTERM', 'SIGKILL', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2'];

/** Registers `burrow ps`, `burrow kill` and `burrow logs` for a sandbox's background commands. */
export function registerProcessCommands(program: Command, context: CliContext & { exitCode: number }): void {
  program
    .command('ps')
    .description("list a sandbox's background commands (running and recently exited)")
    .argument('<id>', 'sandbox id')
    .option('--json', 'print JSON')
    .action(async (id: string, _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<PsOptions>();
      const sandbox = await Sandbox.get(id, connectionFor(context, options));
      const commands = await sandbox.commands.list();
      if (options.json === true) {
        printJson(context, commands);
        return;
      }
      context.stdout.write(
        formatTable(
          ['COMMAND', 'PID', 'STATUS', 'EXIT', 'PTY', 'OUTPUT', 'STARTED', 'ARGV'],
          commands.map((c) => [
            c.commandId,
            String(c.pid),
            c.status,
            c.signal ?? (c.exitCode === null ? '' : String(c.exitCode)) + (c.timedOut ? ' (timeout)' : ''),
            c.pty ? 'yes' : 'no',
            `${c.endOffset}B`,
            c.startedAt,
            c.argv.join(' '),
          ]),
        ),
      );
    });
  program
    .command('kill')
    .description("send a signal to a background command's whole process group")
    .argument('<id>', 'sandbox id')
    .argument('<commandId>', 'command id (from burrow ps)')
    .option('-s, --signal <name>', `signal: ${SIGNALS.join(', ')}`, 'SIGKILL')
    .action(async (id: string, commandId: string, _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<GlobalOptions & { signal: string }>();
      const name = (options.signal.startsWith('SIG') ? options.signal : `SIG${options.signal}`).toUpperCase();
      if (!SIGNALS.includes(name as ExecSignal))
        throw new UsageError(`unknown signal ${options.signal}; use one of ${SIGNALS.join(', ')}`);
      const sandbox = await Sandbox.get(id, connectionFor(context, options));
      await sandbox.commands.kill(commandId, name as ExecSignal);
    });
  program
    .command('logs')
    .description("print a background command's output (raw bytes: stdout to stdout, stderr to stderr)")
    .argument('<id>', 'sandbox id')
    .argument('<commandId>', 'command id (from burrow ps)')
    .option('-f, --follow', 'keep printing until the command exits, then exit with its exit code')
    .option('--offset <bytes>', 'start at this output offset (default: 0, the oldest kept byte)')
    .action(async (id: string, commandId: string, _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<LogsOptions>();
      const offset = options.offset === undefined ? 0 : Number(options.offset);
      if (!Number.isInteger(offset) || offset < 0) throw new UsageError('--offset takes a byte count (0 or more)');
      const sandbox = await Sandbox.get(id, connectionFor(context, options));
      const handle = await sandbox.commands.connect(commandId, { offset });
      const stream = handle.output({ follow: options.follow === true });
      for await (const event of stream) {
        if (event.type === 'stdout') await write(context.stdout, event.data);
        else if (event.type === 'stderr') await write(context.stderr, event.data);
        else if (event.type === 'exit' && options.follow === true) context.exitCode = exitCodeForExit(event);
      }
      if (stream.droppedBytes > 0) {
        context.stderr.write(`note: ${stream.droppedBytes} older bytes were dropped from the command's bounded log\n`);
      }
    });
}

async function write(stream: NodeJS.WritableStream, data: Uint8Array): Promise<void> {
  if (!stream.write(data)) await once(stream, 'drain');
}
