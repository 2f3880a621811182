import type { Command } from 'commander';
import { type CliContext, connectionFor, type GlobalOptions, loadSdk, printJson } from '../cli-context.js';
import { UsageError } from '../exit-codes.js';

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * A duration such as `90s`, `15m`, `1h`, `2d` or `500ms` (a bare number is ms), in ms.
 * @throws UsageError for anything else
 */
export function parseDurationMs(text: string, what: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(text.trim());
  if (match?.[1] === undefined) {
    throw new UsageError(`${what} must be a duration such as 90s, 15m, 1h or 2d, got "${text}"`);
  }
  return Math.round(Number(match[1]) * (UNIT_MS[match[2] ?? 'ms'] ?? 1));
}

/**
 * A port number of 1-65535.
 * @throws UsageError for anything else
 */
function parsePort(text: string): number {
  const port = Number(text);
  if (!/^\d+$/.test(text) || port < 1 || port > 65535) {
    throw new UsageError(`port must be 1-65535, got "${text}"`);
  }
  return port;
}

/** Registers `burrow ports url` and `burrow ports ls`. */
export function registerPortsCommands(program: Command, context: CliContext): void {
  const ports = program.command('ports').description("preview URLs of a sandbox's ports");
  ports
    .command('url')
    .description('print the preview URL of a port (private unless --public; --signed works without the token)')
    .argument('<id>', 'sandbox id')
    .argument('<port>', 'TCP port inside the sandbox, 1-65535')
    .option('--signed', 'a signed URL that needs no token until it expires (sets a cookie for its host)')
    .option('--ttl <duration>', 'life of a signed URL: 90s, 15m, 1h, 2d (default 1h)')
    .option('--public', 'make the port public: its URL answers anyone')
    .option('--private', 'make the port private again')
    .option('--json', 'print the answer as JSON')
    .action(async (id: string, portText: string, _options: unknown, command: Command) => {
      const options = command.optsWithGlobals<
        GlobalOptions & { signed?: boolean; ttl?: string; public?: boolean; private?: boolean; json?: boolean }
      >();
      const port = parsePort(portText);
      if (options.public === true && options.private === true) {
        throw new UsageError('--public and --private contradict each other');
      }
      if (options.ttl !== undefined && options.signed !== true) {
        throw new UsageError('--ttl applies only to a signed URL', 'add --signed');
      }
      const { Sandbox } = await loadSdk();
      const sandbox = await Sandbox.get(id, connectionFor(context, options));
      const url = await sandbox.ports.url(port, {
        ...(options.public === true ? { public: true } : options.private === true ? { public: false } : {}),
        ...(options.signed === true ? { signed: true } : {}),
        ...(options.ttl === undefined ? {} : { ttlMs: parseDurationMs(options.ttl, '--ttl') }),
      });
      if (options.json === true) {
        printJson(context, url);
        return;
      }
      context.stdout.write(`${url.url}\n`);
      if (url.expiresAt !== null) context.stderr.write(`expires at ${url.expiresAt}\n`);
      else if (url.accessToken !== null) {
        context.stderr.write(`private: send the header X-Burrow-Access-Token: ${url.accessToken}\n`);
      }
    });
  ports
    .command('ls')
    .description('list the TCP ports listening inside a sandbox, with their preview URLs')
    .argument('<id>', 'sandbox id')
    .option('--json', 'print the answer as JSON')
    .action(async (id: string, _options: unknown, command: Command) => {
      const options = command.optsWithGlobals<GlobalOptions & { json?: boolean }>();
      const { Sandbox } = await loadSdk();
      const sandbox = await Sandbox.get(id, connectionFor(context, options));
      const list = await sandbox.ports.list();
      if (options.json === true) {
        printJson(context, list);
        return;
      }
      for (const p of list.ports) {
        context.stdout.write(`${p.port}\t${p.address}\t${p.public ? 'public' : 'private'}\t${p.url}\n`);
      }
    });
}
