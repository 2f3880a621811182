import type { CreateApiKeyRequest } from '@burrow/sdk';
import type { Command } from 'commander';
import { type CliContext, connectionFor, formatTable, type GlobalOptions, loadSdk, printJson } from '../cli-context.js';
import { UsageError } from '../exit-codes.js';

/** Registers `burrow keys create|ls|revoke`. */
export function registerKeysCommands(program: Command, context: CliContext): void {
  const keys = program.command('keys').description('manage API keys');

  keys
    .command('create')
    .description('create an API key; prints its secret (shown only once)')
    .argument('<name>', 'a name to recognise the key by')
    .option('--tenant <tenant>', "tenant the key acts for (default: the caller's)")
    .option('--role <role>', 'admin or member (default: member)')
    .option('--e2b', "mint the secret in E2B's format (e2b_ + 40 hex), which older E2B clients require")
    .option('--json', 'print the key and its secret as JSON')
    .action(async (name: string, _options: unknown, command: Command) => {
      const { BurrowClient } = await loadSdk();
      const options = command.optsWithGlobals<
        GlobalOptions & { tenant?: string; role?: string; json?: boolean; e2b?: boolean }
      >();
      const request: CreateApiKeyRequest = { name, ...(options.e2b === true ? { format: 'e2b' as const } : {}) };
      if (options.tenant !== undefined) request.tenantId = options.tenant;
      if (options.role !== undefined) {
        if (options.role !== 'admin' && options.role !== 'member') {
          throw new UsageError(`unknown role "${options.role}"`, 'use --role admin or --role member');
        }
        request.role = options.role;
      }
      const created = await new BurrowClient(connectionFor(context, options)).keys.create(request);
      if (options.json === true) {
        printJson(context, created);
        return;
      }
      context.stderr.write(
        `created ${created.key.id} (${created.key.role} of tenant ${created.key.tenantId}); the secret is shown only once:\n`,
      );
      context.stdout.write(`${created.secret}\n`);
    });

  keys
    .command('ls')
    .description('list API keys')
    .option('--json', 'print the keys as JSON')
    .action(async (_options: unknown, command: Command) => {
      const { BurrowClient } = await loadSdk();
      const options = command.optsWithGlobals<GlobalOptions & { json?: boolean }>();
      const items = await new BurrowClient(connectionFor(context, options)).keys.list();
      if (options.json === true) {
        printJson(context, items);
        return;
      }
      context.stdout.write(
        formatTable(
          ['ID', 'NAME', 'TENANT', 'ROLE', 'PREFIX', 'CREATED', 'REVOKED'],
          items.map((key) => [
            key.id,
            key.name,
            key.tenantId,
            key.role,
            key.prefix,
            key.createdAt,
            key.revokedAt ?? '-',
          ]),
        ),
      );
    });

  keys
    .command('revoke')
    .description('revoke an API key')
    .argument('<id>', 'key id')
    .action(async (id: string, _options: unknown, command: Command) => {
      const { BurrowClient } = await loadSdk();
      await new BurrowClient(connectionFor(context, command.optsWithGlobals<GlobalOptions>())).keys.revoke(id);
      context.stdout.write(`${id}\n`);
    });
}
