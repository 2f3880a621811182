import type { Command } from 'commander';
import type { CliContext } from '../cli-context.js';
import { parsePositiveInt } from '../key-value-parse.js';
import { ProgressSpinner } from '../progress-spinner.js';

type ServerModule = typeof import('@burrow/server');
type ConfigOverrides = import('@burrow/server').ConfigOverrides;

/**
 * Loads `@burrow/server` only for `server` and `setup`, so that every other command starts without fastify,
 * SQLite and the runtime.
 */
async function loadServerModule(): Promise<ServerModule> {
  return import('@burrow/server');
}

/** Registers `burrow server` and `burrow setup`, the two commands that run the server in this process. */
export function registerServerCommands(
  program: Command,
  context: CliContext & { onShutdown: (handler: () => Promise<void>) => void },
): void {
  program
    .command('server')
    .description('run the Burrow server in the foreground (API, reconciler and the local node)')
    .option('--data-dir <dir>', 'state directory (default: BURROW_DATA_DIR or /var/lib/burrow)')
    .option('--host <host>', 'address to listen on (default: BURROW_HOST or 127.0.0.1)')
    .option('--port <port>', 'port to listen on (default: BURROW_PORT or 7420)')
    .action(async (options: { dataDir?: string; host?: string; port?: string }) => {
      const server = await loadServerModule();
      const overrides: ConfigOverrides = {};
      if (options.dataDir !== undefined) overrides.dataDir = options.dataDir;
      if (options.host !== undefined) overrides.host = options.host;
      if (options.port !== undefined) overrides.port = parsePositiveInt(options.port, '--port');
      const running = await server.startServer(server.loadConfig(context.env, overrides));
      context.stderr.write(`burrow server listening on ${running.url}\n`);
      if (running.e2b !== null) {
        context.stderr.write(
          `E2B API on ${running.e2b.apiUrl}, envd on ${running.e2b.envdUrl} (burrow e2b env prints the exports)\n`,
        );
      }
      await new Promise<void>((resolve) => {
        context.onShutdown(async () => {
          context.stderr.write('burrow server: shutting down\n');
          await running.close();
          resolve();
        });
      });
    });

  program
    .command('setup')
    .description('prepare this host: data directory, admin key and the base template (progress on stderr)')
    .option('--data-dir <dir>', 'state directory (default: BURROW_DATA_DIR or /var/lib/burrow)')
    .option('--e2b', "also build the e2b-base template (what E2B's `base` maps to)")
    .action(async (options: { dataDir?: string; e2b?: boolean }) => {
      const server = await loadServerModule();
      const overrides: ConfigOverrides = {};
      if (options.dataDir !== undefined) overrides.dataDir = options.dataDir;
      // The spinner shows progress; the server's info logs would interleave with it as raw JSON.
      if (context.env.BURROW_LOG_LEVEL === undefined) overrides.logLevel = 'warn';
      const spinner = new ProgressSpinner(context.stderr, 'setting up Burrow');
      spinner.start();
      try {
        await server.setup(server.loadConfig(context.env, overrides), {
          onLog: (line) => spinner.update(line),
          e2b: options.e2b === true,
        });
        spinner.stop(true);
      } catch (err) {
        spinner.stop(false);
        throw err;
      }
    });
}
