import type { Command } from 'commander';
import { type CliContext, connectionFor, formatTable, type GlobalOptions, loadSdk, printJson } from '../cli-context.js';
import { UsageError } from '../exit-codes.js';
import { parsePositiveInt } from '../key-value-parse.js';

const ACTIONS = ['delete', 'pause', 'stop'] as const;

interface DefaultsOptions extends GlobalOptions {
  tenant?: string;
  timeout?: string;
  timeoutAction?: string;
  idleTimeout?: string;
  maxAge?: string;
  maxAgeLimit?: string;
  pausedRetention?: string;
  keepSnapshots?: string;
  json?: boolean;
}

/** A duration option: ms, or `none` (the policy off); undefined when the option is absent. */
function duration(value: string | undefined, flag: string): number | null | undefined {
  if (value === undefined) return undefined;
  return value === 'none' ? null : parsePositiveInt(value, flag);
}

/** The rows of a tenant's effective defaults and where each comes from. */
export function defaultsRows(d: {
  tenantId: string;
  effective: Record<string, unknown>;
  sources: Record<string, string>;
}): string[][] {
  return Object.entries(d.effective).map(([policy, value]) => [
    d.tenantId,
    policy,
    value === null ? 'none' : String(value),
    d.sources[policy] ?? '-',
  ]);
}

/** Registers `burrow tenant defaults show|set`. */
export function registerTenantCommands(program: Command, context: CliContext): void {
  const tenant = program.command('tenant').description('tenant settings: lifecycle policy defaults');
  const defaults = tenant
    .command('defaults')
    .description('lifecycle policies a create request of the tenant gets when it leaves them out');
  defaults
    .command('show')
    .description("show the tenant's effective defaults and the source of each (tenant-default, server-default)")
    .option('--tenant <tenant>', 'the tenant (default: the key’s own)')
    .option('--json', 'print as JSON')
    .action(async (_options: unknown, command: Command) => {
      const options = command.optsWithGlobals<DefaultsOptions>();
      const { BurrowClient } = await loadSdk();
      const client = new BurrowClient(connectionFor(context, options));
      const tenantId = options.tenant ?? (await client.quotas.get()).tenantId;
      const result = await client.quotas.defaults(tenantId);
      if (options.json === true) return printJson(context, result);
      context.stdout.write(formatTable(['TENANT', 'POLICY', 'DEFAULT', 'SOURCE'], defaultsRows(result)));
    });
  defaults
    .command('set')
    .description(
      "replace the tenant's defaults (admin keys); a policy left out inherits the server default, `none` turns it off",
    )
    .requiredOption('--tenant <tenant>', 'the tenant')
    .option('--timeout <ms>', 'running-time TTL, ms, or "none"')
    .option('--timeout-action <action>', 'what the TTL does: delete, pause or stop')
    .option('--idle-timeout <ms>', 'pause after this long without activity, ms, or "none"')
    .option('--max-age <ms>', 'delete this long after creation, ms, or "none"')
    .option('--max-age-limit <ms>', 'the longest max age a create request may ask for, ms')
    .option('--paused-retention <ms>', 'delete after staying paused this long, ms, or "none"')
    .option('--keep-snapshots <n>', 'keep only the newest N snapshots of each sandbox, or "none"')
    .option('--json', 'print as JSON')
    .action(async (_options: unknown, command: Command) => {
      const options = command.optsWithGlobals<DefaultsOptions>();
      const body: Record<string, unknown> = {};
      const put = (key: string, value: unknown) => {
        if (value !== undefined) body[key] = value;
      };
      put('timeoutMs', duration(options.timeout, '--timeout'));
      if (options.timeoutAction !== undefined) {
        if (!(ACTIONS as readonly string[]).includes(options.timeoutAction)) {
          throw new UsageError(`unknown timeout action "${options.timeoutAction}"`, `use one of ${ACTIONS.join(', ')}`);
        }
        body.timeoutAction = options.timeoutAction;
      }
      put('idleTimeoutMs', duration(options.idleTimeout, '--idle-timeout'));
      put('maxAgeMs', duration(options.maxAge, '--max-age'));
      put('pausedRetentionMs', duration(options.pausedRetention, '--paused-retention'));
      if (options.maxAgeLimit !== undefined)
        body.maxAgeLimitMs = parsePositiveInt(options.maxAgeLimit, '--max-age-limit');
      if (options.keepSnapshots !== undefined) {
        body.snapshotKeepLast = options.keepSnapshots === 'none' ? null : Number(options.keepSnapshots);
      }
      const { BurrowClient } = await loadSdk();
      const client = new BurrowClient(connectionFor(context, options));
      const result = await client.quotas.setDefaults(options.tenant as string, body);
      if (options.json === true) return printJson(context, result);
      context.stdout.write(formatTable(['TENANT', 'POLICY', 'DEFAULT', 'SOURCE'], defaultsRows(result)));
    });
}
