import type { Event, EventType } from '@burrow/sdk';
import type { Command } from 'commander';
import { type CliContext, connectionFor, formatTable, type GlobalOptions, loadSdk, printJson } from '../cli-context.js';
import { UsageError } from '../exit-codes.js';
import { collect, parsePositiveInt } from '../key-value-parse.js';
import { defaultsRows } from './tenant-commands.js';

async function eventTypes(values: string[] | undefined): Promise<EventType[]> {
  const { EVENT_TYPES } = await import('@burrow/contract/wire');
  const types = values ?? [];
  for (const t of types) {
    if (!(EVENT_TYPES as readonly string[]).includes(t)) {
      throw new UsageError(`unknown event type "${t}"`, `use one of ${EVENT_TYPES.join(', ')}`);
    }
  }
  return types as EventType[];
}

function eventLine(e: Event): string {
  return `${e.id}\t${e.at}\t${e.type}\t${e.sandboxId ?? '-'}\t${e.reason}\t${e.actor}\t${e.message}\n`;
}

function limitText(v: number | null): string {
  return v === null ? 'unlimited' : String(v);
}

/** Registers `burrow events`, `burrow quota` and `burrow webhooks add|ls|rm`. */
export function registerLifecycleCommands(program: Command, context: CliContext): void {
  program
    .command('events')
    .description('lifecycle events (created, paused, warning, expired, quota_denied, …) with reason and actor')
    .option('--sandbox <id>', 'only events of this sandbox')
    .option('--type <type>', 'only this type (repeatable)', collect)
    .option('--after <id>', 'only events after this event id')
    .option('--limit <n>', 'page size without --follow, 1-500 (default: 100)')
    .option('-f, --follow', 'keep streaming new events as they happen (Ctrl-C to stop)')
    .option('--json', 'print events as JSON (one object per line with --follow)')
    .action(async (_options: unknown, command: Command) => {
      const { BurrowClient } = await loadSdk();
      const options = command.optsWithGlobals<
        GlobalOptions & {
          sandbox?: string;
          type?: string[];
          after?: string;
          limit?: string;
          follow?: boolean;
          json?: boolean;
        }
      >();
      const client = new BurrowClient(connectionFor(context, options));
      const filter = { sandboxId: options.sandbox, types: await eventTypes(options.type) };
      if (options.follow === true) {
        const controller = new AbortController();
        const stop = () => controller.abort();
        process.once('SIGINT', stop);
        try {
          for await (const e of client.events.stream({ ...filter, after: options.after, signal: controller.signal })) {
            context.stdout.write(options.json === true ? `${JSON.stringify(e)}\n` : eventLine(e));
          }
        } finally {
          process.off('SIGINT', stop);
        }
        return;
      }
      const page = await client.events.list({
        ...filter,
        cursor: options.after,
        limit: options.limit === undefined ? undefined : parsePositiveInt(options.limit, '--limit'),
      });
      if (options.json === true) {
        printJson(context, page);
        return;
      }
      context.stdout.write(
        formatTable(
          ['ID', 'AT', 'TYPE', 'SANDBOX', 'REASON', 'ACTOR', 'MESSAGE'],
          page.items.map((e) => [e.id, e.at, e.type, e.sandboxId ?? '-', e.reason, e.actor, e.message]),
        ),
      );
    });

  program
    .command('quota')
    .description("show the tenant's quota limits and usage; admins set them with --set")
    .option('--tenant <tenant>', "another tenant's quota (admin keys)")
    .option('--set', 'replace the limits with the --max-* options (admin keys; a limit left out is unlimited)')
    .option('--max-running <n>', 'sandboxes running at once')
    .option('--max-sandboxes <n>', 'sandboxes in any state')
    .option('--max-disk-bytes <n>', 'sum of the sandboxes disk limits, bytes')
    .option('--max-snapshots <n>', 'snapshots kept')
    .option('--max-volumes <n>', 'volumes, volume snapshots and forks kept')
    .option('--max-volume-bytes <n>', 'sum of the volumes sizes, bytes')
    .option('--json', 'print the quota as JSON')
    .action(async (_options: unknown, command: Command) => {
      const { BurrowClient } = await loadSdk();
      const options = command.optsWithGlobals<
        GlobalOptions & {
          tenant?: string;
          set?: boolean;
          maxRunning?: string;
          maxSandboxes?: string;
          maxDiskBytes?: string;
          maxSnapshots?: string;
          maxVolumes?: string;
          maxVolumeBytes?: string;
          json?: boolean;
        }
      >();
      const client = new BurrowClient(connectionFor(context, options));
      const n = (v: string | undefined, flag: string) =>
        v === undefined ? null : Number(v === '0' ? 0 : parsePositiveInt(v, flag));
      let quota: Awaited<ReturnType<typeof client.quotas.get>>;
      if (options.set === true) {
        if (options.tenant === undefined) throw new UsageError('--set needs --tenant', 'pass --tenant NAME');
        quota = await client.quotas.set(options.tenant, {
          maxRunning: n(options.maxRunning, '--max-running'),
          maxSandboxes: n(options.maxSandboxes, '--max-sandboxes'),
          maxDiskBytes: n(options.maxDiskBytes, '--max-disk-bytes'),
          maxSnapshots: n(options.maxSnapshots, '--max-snapshots'),
          maxVolumes: n(options.maxVolumes, '--max-volumes'),
          maxVolumeBytes: n(options.maxVolumeBytes, '--max-volume-bytes'),
        });
      } else {
        quota = await client.quotas.get(options.tenant);
      }
      if (options.json === true) {
        printJson(context, quota);
        return;
      }
      const { limits, usage } = quota;
      context.stdout.write(
        formatTable(
          ['TENANT', 'WHAT', 'USED', 'LIMIT'],
          [
            [quota.tenantId, 'running', String(usage.running), limitText(limits.maxRunning)],
            [quota.tenantId, 'sandboxes', String(usage.sandboxes), limitText(limits.maxSandboxes)],
            [quota.tenantId, 'disk bytes', String(usage.diskBytes), limitText(limits.maxDiskBytes)],
            [quota.tenantId, 'snapshots', String(usage.snapshots), limitText(limits.maxSnapshots)],
            [quota.tenantId, 'volumes', String(usage.volumes), limitText(limits.maxVolumes)],
            [quota.tenantId, 'volume bytes', String(usage.volumeBytes), limitText(limits.maxVolumeBytes)],
          ],
        ),
      );
      // The lifecycle defaults the tenant's new sandboxes get, with their source.
      const defaults = await client.quotas.defaults(quota.tenantId);
      context.stdout.write(formatTable(['TENANT', 'POLICY', 'DEFAULT', 'SOURCE'], defaultsRows(defaults)));
    });

  const webhooks = program.command('webhooks').description('webhooks: signed POSTs of each event to your URL');
  webhooks
    .command('add')
    .description('register a webhook; prints its signing secret (shown only once)')
    .argument('<url>', 'http(s) URL that receives events')
    .option('--type <type>', 'only this event type (repeatable)', collect)
    .option('--secret <secret>', 'signing secret, 16-256 characters (default: generated)')
    .option('--json', 'print the webhook and its secret as JSON')
    .action(async (url: string, _options: unknown, command: Command) => {
      const { BurrowClient } = await loadSdk();
      const options = command.optsWithGlobals<GlobalOptions & { type?: string[]; secret?: string; json?: boolean }>();
      const types = await eventTypes(options.type);
      const created = await new BurrowClient(connectionFor(context, options)).webhooks.add({
        url,
        ...(types.length === 0 ? {} : { types }),
        ...(options.secret === undefined ? {} : { secret: options.secret }),
      });
      if (options.json === true) {
        printJson(context, created);
        return;
      }
      context.stderr.write(`created ${created.webhook.id}; the signing secret is shown only once:\n`);
      context.stdout.write(`${created.secret}\n`);
    });
  webhooks
    .command('ls')
    .description('list webhooks with delivery counts')
    .option('--json', 'print the webhooks as JSON')
    .action(async (_options: unknown, command: Command) => {
      const { BurrowClient } = await loadSdk();
      const options = command.optsWithGlobals<GlobalOptions & { json?: boolean }>();
      const items = await new BurrowClient(connectionFor(context, options)).webhooks.list();
      if (options.json === true) {
        printJson(context, items);
        return;
      }
      context.stdout.write(
        formatTable(
          ['ID', 'URL', 'TYPES', 'DELIVERED', 'PENDING', 'FAILED'],
          items.map((w) => [
            w.id,
            w.url,
            w.types === null ? 'all' : w.types.join(','),
            String(w.deliveries.delivered),
            String(w.deliveries.pending),
            String(w.deliveries.failed),
          ]),
        ),
      );
    });
  webhooks
    .command('rm')
    .alias('delete')
    .description('remove a webhook and its pending deliveries')
    .argument('<id>', 'webhook id')
    .action(async (id: string, _options: unknown, command: Command) => {
      const { BurrowClient } = await loadSdk();
      await new BurrowClient(connectionFor(context, command.optsWithGlobals<GlobalOptions>())).webhooks.remove(id);
      context.stdout.write(`${id}\n`);
    });
}
