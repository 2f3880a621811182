import type { CreateSandboxRequest, SandboxInfo, SandboxState } from '@burrow/sdk';
import type { Command } from 'commander';
import { type CliContext, connectionFor, formatTable, type GlobalOptions, loadSdk, printJson } from '../cli-context.js';
import { UsageError } from '../exit-codes.js';
import { collect, keyValueRecord, parsePositiveInt, parsePositiveNumber } from '../key-value-parse.js';
import { describeNetwork, type NetworkFlags, networkOptions, networkRequest } from './network-commands.js';
import { secretOptions, secretRequests } from './secrets-commands.js';
import { parseVolumeFlag } from './volume-commands.js';

interface CreateOptions extends GlobalOptions, NetworkFlags {
  template?: string;
  cpu?: string;
  memory?: string;
  disk?: string;
  env?: string[];
  label?: string[];
  timeout?: string;
  timeoutAction?: string;
  idleTimeout?: string;
  maxAge?: string;
  pausedRetention?: string;
  keepSnapshots?: string;
  fromSnapshot?: string;
  fsOnly?: boolean;
  autoResume?: boolean;
  volume?: string[];
  json?: boolean;
}

const STATES: readonly SandboxState[] = [
  'creating',
  'running',
  'pausing',
  'paused',
  'resuming',
  'stopping',
  'stopped',
  'deleting',
  'deleted',
  'error',
];

/** Registers `burrow sandbox create|ls|info|rm`. */
export function registerSandboxCommands(program: Command, context: CliContext): void {
  const sandbox = program.command('sandbox').description('create, list, inspect and remove sandboxes');

  const create = sandbox
    .command('create')
    .description('create a sandbox and wait until it runs; prints its id')
    .option('--template <name>', 'template to start from (default: base)')
    .option('--cpu <n>', 'CPU cores, fractions allowed (default: 1)')
    .option('--memory <mib>', 'memory limit in MiB (default: 512)')
    .option('--disk <mib>', 'disk limit in MiB (default: 2048)')
    .option('--env <K=V>', 'environment variable for every command (repeatable)', collect)
    .option('--label <K=V>', 'label (repeatable)', collect)
    .option(
      '--timeout <ms>',
      'running-time TTL in ms (stops while paused), or "none" (default: the server\'s, built in: none)',
    )
    .option(
      '--timeout-action <action>',
      "what the TTL does: delete, pause or stop (default: the server's, built in: delete)",
    )
    .option(
      '--idle-timeout <ms>',
      'pause after this long without activity, ms, or "none" (default: the server\'s, built in: 900000, 15 min)',
    )
    .option(
      '--max-age <ms>',
      "delete this long after creation whatever happens, ms (default: the server's, built in: never)",
    )
    .option(
      '--paused-retention <ms>',
      "delete after staying paused this long, ms (default: the server's, built in: keep)",
    )
    .option('--keep-snapshots <n>', 'keep only the newest N snapshots of this sandbox (default: all)')
    .option('--from-snapshot <name>', 'start from this snapshot (name or id), processes and memory included')
    .option('--fs-only', 'with --from-snapshot: boot on its files only, without its processes and memory')
    .option('--no-auto-resume', 'exec and file calls on the paused sandbox fail instead of resuming it')
    .option('--volume <NAME:/path[:ro]>', 'mount a volume (repeatable; :ro read-only)', collect);
  secretOptions(networkOptions(create))
    .option('--json', 'print the sandbox as JSON')
    .action(async (_options: CreateOptions, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<CreateOptions>();
      const request: CreateSandboxRequest = {
        env: keyValueRecord(options.env, 'env'),
        labels: keyValueRecord(options.label, 'label'),
      };
      if (options.template !== undefined) request.template = options.template;
      if (options.cpu !== undefined) request.cpuCount = parsePositiveNumber(options.cpu, '--cpu');
      if (options.memory !== undefined) request.memoryMiB = parsePositiveInt(options.memory, '--memory');
      if (options.disk !== undefined) request.diskMiB = parsePositiveInt(options.disk, '--disk');
      if (options.timeout !== undefined) {
        request.timeoutMs = options.timeout === 'none' ? null : parsePositiveInt(options.timeout, '--timeout');
      }
      Object.assign(request, policyOptions(options));
      if (options.fsOnly === true && options.fromSnapshot === undefined) {
        throw new UsageError('--fs-only needs --from-snapshot', 'pass --from-snapshot NAME');
      }
      if (options.fromSnapshot !== undefined) {
        request.fromSnapshot = options.fromSnapshot;
        request.restoreMemory = options.fsOnly !== true;
      }
      if (options.autoResume === false) request.autoResume = false;
      const network = networkRequest(options);
      if (network !== undefined) request.network = network;
      const secrets = secretRequests(command.opts<{ secret?: string[] }>());
      if (secrets !== undefined) request.secrets = secrets;
      if (options.volume !== undefined) request.volumes = options.volume.map(parseVolumeFlag);
      const created = await Sandbox.create({ ...request, ...connectionFor(context, options) });
      if (options.json === true) printJson(context, created.info);
      else context.stdout.write(`${created.id}\n`);
    });

  sandbox
    .command('ls')
    .description('list sandboxes')
    .option('--state <state>', `only sandboxes in this state (${STATES.join(', ')})`)
    .option('--label <K=V>', 'only sandboxes with this label (repeatable)', collect)
    .option('--json', 'print the sandboxes as JSON')
    .action(async (_options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<GlobalOptions & { state?: string; label?: string[]; json?: boolean }>();
      if (options.state !== undefined && !STATES.includes(options.state as SandboxState)) {
        throw new UsageError(`unknown state "${options.state}"`, `use one of ${STATES.join(', ')}`);
      }
      const items: SandboxInfo[] = [];
      for await (const found of Sandbox.listAll({
        ...connectionFor(context, options),
        state: options.state as SandboxState | undefined,
        labels: keyValueRecord(options.label, 'label'),
        limit: 200,
      })) {
        items.push(found.info);
      }
      if (options.json === true) {
        printJson(context, items);
        return;
      }
      context.stdout.write(
        formatTable(
          ['ID', 'STATE', 'TEMPLATE', 'CPU', 'MEMORY', 'CREATED', 'LABELS'],
          items.map((item) => [
            item.id,
            item.state,
            item.template,
            String(item.resources.cpuCount),
            `${item.resources.memoryMiB}MiB`,
            item.createdAt,
            Object.entries(item.labels)
              .map(([key, value]) => `${key}=${value}`)
              .join(','),
          ]),
        ),
      );
    });

  sandbox
    .command('info')
    .description('show one sandbox')
    .argument('<id>', 'sandbox id')
    .option('--json', 'print the sandbox as JSON')
    .action(async (id: string, _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<GlobalOptions & { json?: boolean }>();
      const found = await Sandbox.get(id, connectionFor(context, options));
      if (options.json === true) printJson(context, found.info);
      else context.stdout.write(describeSandbox(found.info));
    });

  sandbox
    .command('set-timeout')
    .description('set the TTL to MS from now ("none" for no TTL); other policies stay; prints the new deadline')
    .argument('<id>', 'sandbox id')
    .argument('<ms>', 'time to live from now in ms, or "none"')
    .option('--json', 'print the sandbox as JSON')
    .action(async (id: string, ms: string, _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<GlobalOptions & { json?: boolean }>();
      const found = await Sandbox.get(id, connectionFor(context, options));
      const info = await found.setTimeout(ms === 'none' ? null : parsePositiveInt(ms, 'MS'));
      if (options.json === true) printJson(context, info);
      else context.stdout.write(`${info.timeoutAt ?? 'never'}\n`);
    });

  sandbox
    .command('set-policy')
    .description('change lifecycle policies; options left out stay as they are ("none" turns one off)')
    .argument('<id>', 'sandbox id')
    .option('--timeout-action <action>', 'what the TTL does: delete, pause or stop')
    .option('--idle-timeout <ms>', 'pause after this long without activity, ms, or "none"')
    .option('--max-age <ms>', 'delete this long after creation, ms, or "none"')
    .option('--paused-retention <ms>', 'delete after staying paused this long, ms, or "none"')
    .option('--keep-snapshots <n>', 'keep only the newest N snapshots, or "none"')
    .option('--json', 'print the sandbox as JSON')
    .action(async (id: string, _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<CreateOptions>();
      const policies = policyOptions(options);
      if (Object.keys(policies).length === 0) {
        throw new UsageError('no policy to change', 'pass at least one of --idle-timeout, --max-age, …');
      }
      const found = await Sandbox.get(id, connectionFor(context, options));
      const info = await found.updatePolicies(policies);
      if (options.json === true) printJson(context, info);
      else context.stdout.write(describeSandbox(info));
    });

  sandbox
    .command('keepalive')
    .description('count the sandbox as active (optionally for a lease) and push its TTL to now + timeout')
    .argument('<id>', 'sandbox id')
    .option('--for <ms>', 'count it as active for this long, ms (default: just now)')
    .option('--no-extend', 'leave the TTL as it is')
    .action(async (id: string, _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<GlobalOptions & { for?: string; extend?: boolean }>();
      const found = await Sandbox.get(id, connectionFor(context, options));
      const info = await found.keepalive({
        durationMs: options.for === undefined ? 0 : parsePositiveInt(options.for, '--for'),
        extendTimeout: options.extend !== false,
      });
      context.stdout.write(`${info.expiresAt ?? 'never'}\n`);
    });

  sandbox
    .command('rm')
    .alias('delete')
    .description('delete sandboxes with everything they hold; prints each deleted id')
    .argument('<id...>', 'sandbox ids')
    .action(async (ids: string[], _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const connection = connectionFor(context, command.optsWithGlobals<GlobalOptions>());
      let firstError: unknown;
      for (const id of ids) {
        try {
          const found = await Sandbox.get(id, connection);
          await found.delete();
          context.stdout.write(`${id}\n`);
        } catch (err) {
          if (ids.length === 1) throw err;
          firstError ??= err;
          context.stderr.write(`error: ${id}: ${err instanceof Error ? err.message : String(err)}\n`);
        }
      }
      if (firstError !== undefined) throw firstError;
    });
}

function describeSandbox(info: SandboxInfo): string {
  const rows: Array<[string, string]> = [
    ['id', info.id],
    ['state', info.state],
    ['template', `${info.template} (${info.templateId.slice(0, 12)})`],
    ['cpu', String(info.resources.cpuCount)],
    ['memory', `${info.resources.memoryMiB} MiB`],
    ['disk', `${info.resources.diskMiB} MiB`],
    ['cwd', info.cwd],
    ['hostname', info.hostname],
    [
      'labels',
      Object.entries(info.labels)
        .map(([key, value]) => `${key}=${value}`)
        .join(', '),
    ],
    ['created', info.createdAt],
    ['expires', info.expiry === null ? 'never' : `${info.expiry.at} (${info.expiry.action}: ${info.expiry.reason})`],
    ['ttl ends', info.timeoutAt === null ? 'never' : `${info.timeoutAt} (${info.timeoutAction})`],
    ['idle deadline', info.idleDeadlineAt ?? '-'],
    ['policies', describePolicies(info)],
    ['desired', info.desiredState],
    ['keeps', info.keeps.memory ? 'files, processes and memory' : 'files only'],
    ['auto-resume', info.autoResume ? 'yes' : 'no'],
    ['network', describeNetwork(info)],
  ];
  if (info.lineage.parentId !== null) rows.push(['forked from', info.lineage.parentId]);
  if (info.lineage.snapshotId !== null) rows.push(['from snapshot', info.lineage.snapshotId]);
  for (const condition of info.conditions) {
    rows.push([`condition`, `${condition.type}=${condition.status} ${condition.reason}: ${condition.message}`]);
  }
  const width = Math.max(...rows.map(([key]) => key.length));
  return rows.map(([key, value]) => `${`${key}:`.padEnd(width + 2)}${value}\n`).join('');
}

const ACTIONS = ['delete', 'pause', 'stop'] as const;

/** `--timeout-action`, `--idle-timeout`, `--max-age`, `--paused-retention`, `--keep-snapshots` as request fields. */
function policyOptions(options: CreateOptions): Partial<CreateSandboxRequest> {
  const out: Partial<CreateSandboxRequest> = {};
  const ms = (value: string | undefined, flag: string) =>
    value === undefined ? undefined : value === 'none' ? null : parsePositiveInt(value, flag);
  if (options.timeoutAction !== undefined) {
    const action = options.timeoutAction as (typeof ACTIONS)[number];
    if (!ACTIONS.includes(action)) {
      throw new UsageError(`unknown timeout action "${options.timeoutAction}"`, `use one of ${ACTIONS.join(', ')}`);
    }
    out.timeoutAction = action;
  }
  const idle = ms(options.idleTimeout, '--idle-timeout');
  if (idle !== undefined) out.idleTimeoutMs = idle;
  const maxAge = ms(options.maxAge, '--max-age');
  if (maxAge !== undefined) out.maxAgeMs = maxAge;
  const retention = ms(options.pausedRetention, '--paused-retention');
  if (retention !== undefined) out.pausedRetentionMs = retention;
  if (options.keepSnapshots !== undefined) {
    out.snapshotKeepLast =
      options.keepSnapshots === 'none' ? null : parseNonNegativeInt(options.keepSnapshots, '--keep-snapshots');
  }
  return out;
}

function parseNonNegativeInt(value: string, flag: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0)
    throw new UsageError(`${flag} must be a whole number, got "${value}"`, `pass ${flag} 3`);
  return n;
}

function describePolicies(info: SandboxInfo): string {
  const parts: string[] = [];
  // Each policy with where its value comes from (request, tenant-default, server-default) when the server says.
  const from = (key: string) => (info.policySources?.[key] === undefined ? '' : ` (${info.policySources[key]})`);
  if (info.timeoutMs !== null)
    parts.push(`timeout ${info.timeoutMs} ms running → ${info.timeoutAction}${from('timeoutMs')}`);
  if (info.idleTimeoutMs !== null) parts.push(`idle ${info.idleTimeoutMs} ms → pause${from('idleTimeoutMs')}`);
  if (info.maxAgeMs !== null) parts.push(`max age ${info.maxAgeMs} ms${from('maxAgeMs')}`);
  if (info.pausedRetentionMs !== null) {
    parts.push(`paused retention ${info.pausedRetentionMs} ms${from('pausedRetentionMs')}`);
  }
  if (info.snapshotKeepLast !== null) parts.push(`keep ${info.snapshotKeepLast} snapshots${from('snapshotKeepLast')}`);
  return parts.length === 0 ? 'none' : parts.join('; ');
}
