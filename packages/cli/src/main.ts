import { readFileSync } from 'node:fs';
import { BurrowError } from '@burrow/sdk/errors';
import { CommanderError } from 'commander';
import { ExitCode, exitCodeForError, UsageError } from './exit-codes.js';
import { buildProgram, type ProgramContext } from './program.js';

const VERSION = '0.1.0';

/**
 * Runs `burrow` with these arguments (as `process.argv`) and returns the exit code. The composition root: the only
 * place that reads the environment and installs process signal handlers.
 */
export async function main(argv: readonly string[]): Promise<number> {
  const shutdownHandlers: Array<() => Promise<void>> = [];
  const context: ProgramContext = {
    env: process.env,
    stdout: process.stdout,
    stderr: process.stderr,
    stdin: process.stdin,
    readFile: (path) => readFileSync(path, 'utf8'),
    exitCode: ExitCode.ok,
    onShutdown: (handler) => {
      if (shutdownHandlers.length === 0) {
        const shutdown = () => {
          for (const run of shutdownHandlers.splice(0)) {
            run().catch((err: unknown) => printError(context, err));
          }
        };
        process.once('SIGINT', shutdown);
        process.once('SIGTERM', shutdown);
      }
      shutdownHandlers.push(handler);
    },
  };
  try {
    await buildProgram(context, VERSION).parseAsync([...argv]);
    return context.exitCode;
  } catch (err) {
    // Commander has already printed its own usage errors.
    if (!(err instanceof CommanderError)) printError(context, err);
    return exitCodeForError(err);
  }
}

/** Prints an error once: `error: <message>`, then `hint: <hint>` when there is one. */
export function printError(context: Pick<ProgramContext, 'stderr' | 'env'>, err: unknown): void {
  const message = err instanceof Error ? err.message : String(err);
  context.stderr.write(`error: ${message}\n`);
  const hint = err instanceof BurrowError || err instanceof UsageError ? err.hint : undefined;
  if (hint !== undefined) context.stderr.write(`hint: ${hint}\n`);
  if (err instanceof BurrowError && err.requestId !== '') context.stderr.write(`request id: ${err.requestId}\n`);
  if (context.env.BURROW_DEBUG === '1' && err instanceof Error && err.stack !== undefined) {
    context.stderr.write(`${err.stack}\n`);
  }
}
