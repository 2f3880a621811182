import type { Command } from 'commander';
import { type CliContext, connectionFor, formatTable, type GlobalOptions, loadSdk, printJson } from '../cli-context.js';
import { UsageError } from '../exit-codes.js';

/** The secret value from stdin: all of it, less one trailing newline (`echo "$KEY" | burrow secrets set …`). */
async function valueFromStdin(context: CliContext): Promise<string> {
  if (context.stdin.isTTY === true) {
    throw new UsageError(
      'the value is read from stdin',
      'pipe it in: printf \'%s\' "$KEY" | burrow secrets set NAME …',
    );
  }
  const chunks: Buffer[] = [];
  for await (const chunk of context.stdin) chunks.push(chunk as Buffer);
  const value = Buffer.concat(chunks)
    .toString('utf8')
    .replace(/\r?\n$/, '');
  if (value === '') throw new UsageError('stdin held no value', 'pipe the secret value in');
  return value;
}

function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

/** Registers `burrow secrets set|rotate|ls|rm`. */
export function registerSecretsCommands(program: Command, context: CliContext): void {
  const secrets = program
    .command('secrets')
    .description('secrets substituted at egress: sandboxes hold placeholders, requests to the hosts carry the value');

  secrets
    .command('set')
    .description('create or replace a secret; the value is read from stdin')
    .argument('<name>', 'letters, digits and _ (the env var a sandbox gets by default)')
    .requiredOption('--host <host>', 'a host whose requests get the value (domain or *.domain; repeat)', collect)
    .option('--header <name>', 'put the value into this header of every request to the hosts')
    .option('--format <format>', "with --header: the header's value, {value} standing for the secret", undefined)
    .option('--json', 'print the secret (never its value) as JSON')
    .action(async (name: string, _options: unknown, command: Command) => {
      const options = command.optsWithGlobals<
        GlobalOptions & { host: string[]; header?: string; format?: string; json?: boolean }
      >();
      if (options.format !== undefined && options.header === undefined) {
        throw new UsageError('--format needs --header', 'name the header the formatted value goes into');
      }
      const value = await valueFromStdin(context);
      const { BurrowClient } = await loadSdk();
      const secret = await new BurrowClient(connectionFor(context, options)).secrets.set(name, {
        value,
        hosts: options.host,
        ...(options.header === undefined ? {} : { header: options.header }),
        ...(options.format === undefined ? {} : { format: options.format }),
      });
      if (options.json === true) printJson(context, secret);
      else context.stdout.write(`${secret.name}\n`);
    });

  secrets
    .command('rotate')
    .description("replace a secret's value (from stdin); sandboxes send the new one from their next request")
    .argument('<name>', 'secret name')
    .action(async (name: string, _options: unknown, command: Command) => {
      const options = command.optsWithGlobals<GlobalOptions>();
      const value = await valueFromStdin(context);
      const { BurrowClient } = await loadSdk();
      await new BurrowClient(connectionFor(context, options)).secrets.rotate(name, value);
      context.stdout.write(`${name}\n`);
    });

  secrets
    .command('ls')
    .description("list the tenant's secrets (never their values)")
    .option('--json', 'print the secrets as JSON')
    .action(async (_options: unknown, command: Command) => {
      const options = command.optsWithGlobals<GlobalOptions & { json?: boolean }>();
      const { BurrowClient } = await loadSdk();
      const items = await new BurrowClient(connectionFor(context, options)).secrets.list();
      if (options.json === true) {
        printJson(context, items);
        return;
      }
      context.stdout.write(
        formatTable(
          ['NAME', 'HOSTS', 'HEADER', 'CREATED', 'ROTATED'],
          items.map((s) => [
            s.name,
            s.hosts.join(','),
            s.header === null ? '-' : `${s.header}: ${s.format}`,
            s.createdAt,
            s.rotatedAt ?? '-',
          ]),
        ),
      );
    });

  secrets
    .command('rm')
    .alias('delete')
    .description('delete a secret; sandboxes holding it send the placeholder from then on')
    .argument('<name>', 'secret name')
    .action(async (name: string, _options: unknown, command: Command) => {
      const { BurrowClient } = await loadSdk();
      await new BurrowClient(connectionFor(context, command.optsWithGlobals<GlobalOptions>())).secrets.delete(name);
      context.stdout.write(`${name}\n`);
    });
}

/** Adds `--secret NAME[:ENV]` (repeatable) to `command` (sandbox create). */
export function secretOptions(command: Command): Command {
  return command.option(
    '--secret <name[:env]>',
    'hold a placeholder of this secret in env var ENV (default: NAME); requests to its hosts carry the value (repeatable)',
    collect,
  );
}

/** The `secrets` of a create request from `--secret` flags, or undefined without any. */
export function secretRequests(flags: {
  secret?: string[];
}): Array<string | { name: string; env: string }> | undefined {
  if (flags.secret === undefined) return undefined;
  return flags.secret.map((entry) => {
    const at = entry.indexOf(':');
    return at === -1 ? entry : { name: entry.slice(0, at), env: entry.slice(at + 1) };
  });
}
