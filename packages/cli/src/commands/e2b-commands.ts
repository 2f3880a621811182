import type { Command } from 'commander';
import { type CliContext, connectionFor, type GlobalOptions } from '../cli-context.js';

/** Default ports of the E2B control plane and envd (as `burrow server` uses them). */
const DEFAULT_E2B_API_PORT = 49982;
const DEFAULT_E2B_ENVD_PORT = 49983;
const DEFAULT_API_URL = 'http://127.0.0.1:7420';

/**
 * The `export` lines that point E2B's SDKs at this Burrow server: the host of the Burrow URL, the E2B ports from
 * `BURROW_E2B_API_PORT` / `BURROW_E2B_ENVD_PORT` (defaults 49982 and 49983), and the API key.
 * @throws Error when the Burrow URL is not a URL or no API key is found
 */
export function e2bEnvLines(input: {
  apiUrl: string | undefined;
  apiKey: string | undefined;
  env: Readonly<Record<string, string | undefined>>;
}): string {
  const base = new URL(input.apiUrl ?? DEFAULT_API_URL);
  if (input.apiKey === undefined) {
    throw new Error('no API key: pass --api-key, set BURROW_API_KEY, or set BURROW_DATA_DIR to find the admin key');
  }
  const at = (port: string) => `${base.protocol}//${base.hostname}:${port}`;
  const apiPort = input.env.BURROW_E2B_API_PORT || String(DEFAULT_E2B_API_PORT);
  const envdPort = input.env.BURROW_E2B_ENVD_PORT || String(DEFAULT_E2B_ENVD_PORT);
  return [
    `export E2B_API_URL=${at(apiPort)}`,
    `export E2B_SANDBOX_URL=${at(envdPort)}`,
    `export E2B_API_KEY=${input.apiKey}`,
    '',
  ].join('\n');
}

/** Registers `burrow e2b env`. */
export function registerE2bCommands(program: Command, context: CliContext): void {
  const e2b = program.command('e2b').description("E2B compatibility: point E2B's SDKs at this server");
  e2b
    .command('env')
    .description('print the export lines for E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (eval "$(burrow e2b env)")')
    .action((_options: unknown, command: Command) => {
      const connection = connectionFor(context, command.optsWithGlobals<GlobalOptions>());
      context.stdout.write(e2bEnvLines({ apiUrl: connection.apiUrl, apiKey: connection.apiKey, env: context.env }));
    });
}
