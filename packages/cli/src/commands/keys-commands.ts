import type { ApiKey, CreateApiKeyRequest } from '@burrow/sdk';
import type { Command } from 'commander';
import { type CliContext, connectionFor, formatTable, type GlobalOptions, loadSdk, printJson } from '../cli-context.js';
import { UsageError } from '../exit-codes.js';
import { collect, keyValueRecord, parseDurationMs } from '../key-value-parse.js';

const ROLES = ['admin', 'member', 'viewer'] as const;

/** How a key's restriction reads in a table: `sandbox sbx_…`, `labels team=x,env=dev`, or `-`. */
export function restrictionText(restriction: ApiKey['restriction']): string {
  if (restriction === null) return '-';
  if (restriction.type === 'sandbox') return `sandbox ${restriction.sandboxId}`;
  return `labels ${Object.entries(restriction.labels)
    .map(([k, v]) => `${k}=${v}`)
    .join(',')}`;
}

/** Registers `burrow keys create|ls|revoke`. */
export function registerKeysCommands(program: Command, context: CliContext): void {
  const keys = program.command('keys').description('manage API keys');

  keys
    .command('create')
    .description('create an API key; prints its secret (shown only once)')
    .argument('<name>', 'a name to recognise the key by')
    .option('--tenant <tenant>', "tenant the key acts for (default: the caller's)")
    .option('--role <role>', 'admin, member or viewer (default: member)')
    .option('--scope <scopes>', 'comma-separated scopes, e.g. commands,files (default: every scope of the role)')
    .option('--sandbox <id>', 'restrict the key to this one sandbox')
    .option('--label <key=value>', 'restrict the key to sandboxes carrying this label (repeatable)', collect)
    .option('--ttl <duration>', 'the key stops working after this long: 30m, 1h, 7d (default: never)')
    .option('--e2b', "mint the secret in E2B's format (e2b_ + 40 hex), which older E2B clients require")
    .option('--json', 'print the key and its secret as JSON')
    .action(async (name: string, _options: unknown, command: Command) => {
      const options = command.optsWithGlobals<
        GlobalOptions & {
          tenant?: string;
          role?: string;
          scope?: string;
          sandbox?: string;
          label?: string[];
          ttl?: string;
          json?: boolean;
          e2b?: boolean;
        }
      >();
      const request: CreateApiKeyRequest = { name, ...(options.e2b === true ? { format: 'e2b' as const } : {}) };
      if (options.tenant !== undefined) request.tenantId = options.tenant;
      if (options.role !== undefined) {
        const role = ROLES.find((r) => r === options.role);
        if (role === undefined) {
          throw new UsageError(`unknown role "${options.role}"`, 'use --role admin, member or viewer');
        }
        request.role = role;
      }
      if (options.scope !== undefined) {
        request.scopes = options.scope.split(',').map((s) => s.trim()) as NonNullable<CreateApiKeyRequest['scopes']>;
      }
      if (options.sandbox !== undefined && options.label !== undefined) {
        throw new UsageError('pass --sandbox or --label, not both', 'a key is restricted one way');
      }
      if (options.sandbox !== undefined) request.restriction = { type: 'sandbox', sandboxId: options.sandbox };
      if (options.label !== undefined) {
        request.restriction = { type: 'labels', labels: keyValueRecord(options.label, 'label') };
      }
      if (options.ttl !== undefined) request.ttlMs = parseDurationMs(options.ttl, '--ttl');
      const { BurrowClient } = await loadSdk();
      const created = await new BurrowClient(connectionFor(context, options)).keys.create(request);
      if (options.json === true) {
        printJson(context, created);
        return;
      }
      const scopes = created.key.scopes === null ? 'every scope of its role' : created.key.scopes.join(',');
      const reach = restrictionText(created.key.restriction);
      context.stderr.write(
        `created ${created.key.id} (${created.key.role} of tenant ${created.key.tenantId}; ${scopes}` +
          `${reach === '-' ? '' : `; ${reach} only`}${created.key.expiresAt === null ? '' : `; expires ${created.key.expiresAt}`}` +
          '); the secret is shown only once:\n',
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
          ['ID', 'NAME', 'TENANT', 'ROLE', 'SCOPES', 'RESTRICTION', 'EXPIRES', 'LAST USED', 'REVOKED'],
          items.map((key) => [
            key.id,
            key.name,
            key.tenantId,
            key.role,
            key.scopes === null ? '*' : key.scopes.join(','),
            restrictionText(key.restriction),
            key.expiresAt ?? '-',
            key.lastUsedAt ?? '-',
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
