import type { Snapshot } from '@burrow/sdk';
import type { Command } from 'commander';
import { type CliContext, connectionFor, formatTable, type GlobalOptions, loadSdk, printJson } from '../cli-context.js';
import { UsageError } from '../exit-codes.js';
import { parsePositiveInt } from '../key-value-parse.js';

const VERBS = [
  ['pause', 'checkpoint processes and memory with the disk and release CPU and RAM; prints the id'],
  ['resume', 'resume a paused sandbox, processes continuing where they were; prints the id'],
  ['stop', 'end every process and keep the disk; prints the id'],
  ['start', 'boot a stopped sandbox fresh on its disk (a paused one resumes); prints the id'],
] as const;

/** Registers `burrow pause|resume|stop|start ID`, `burrow fork ID --count N` and `burrow snapshot create|ls|info|rm`. */
export function registerPersistenceCommands(program: Command, context: CliContext): void {
  for (const [verb, description] of VERBS) {
    program
      .command(verb)
      .description(description)
      .argument('<id>', 'sandbox id')
      .option('--json', 'print the sandbox as JSON')
      .action(async (id: string, _options: unknown, command: Command) => {
        const { Sandbox } = await loadSdk();
        const options = command.optsWithGlobals<GlobalOptions & { json?: boolean }>();
        const connection = connectionFor(context, options);
        const info =
          verb === 'resume'
            ? (await Sandbox.resume(id, connection)).info
            : await (await Sandbox.get(id, connection))[verb]();
        if (options.json === true) printJson(context, info);
        else context.stdout.write(`${info.id}\n`);
      });
  }

  program
    .command('fork')
    .description('make N new sandboxes from one checkpoint of a sandbox; prints their ids')
    .argument('<id>', 'sandbox id')
    .option('--count <n>', 'how many children (1-20, default 1)')
    .option('--volumes <mode>', 'read-write volume mounts: fork (a copy per child, default), share-readonly or refuse')
    .option('--json', 'print the new sandboxes as JSON')
    .action(async (id: string, _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<GlobalOptions & { count?: string; volumes?: string; json?: boolean }>();
      const volumes = options.volumes;
      if (volumes !== undefined && volumes !== 'fork' && volumes !== 'share-readonly' && volumes !== 'refuse') {
        throw new UsageError(`unknown --volumes "${volumes}"`, 'use fork, share-readonly or refuse');
      }
      const count = options.count === undefined ? 1 : parsePositiveInt(options.count, '--count');
      if (count > 20) throw new UsageError('--count is at most 20', 'fork in several calls');
      const parent = await Sandbox.get(id, connectionFor(context, options));
      const children = await parent.fork({ count, ...(volumes === undefined ? {} : { volumes }) });
      if (options.json === true)
        printJson(
          context,
          children.map((child) => child.info),
        );
      else for (const child of children) context.stdout.write(`${child.id}\n`);
    });

  const snapshot = program.command('snapshot').description('create, list, inspect and remove snapshots');
  snapshot
    .command('create')
    .description('snapshot a sandbox; prints the snapshot id')
    .argument('<id>', 'sandbox id')
    .option('--name <name>', 'name it (a named snapshot outlives its sandbox)')
    .option('--fs-only', 'files only, without processes and memory')
    .option('--json', 'print the snapshot as JSON')
    .action(async (id: string, _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<GlobalOptions & { name?: string; fsOnly?: boolean; json?: boolean }>();
      const found = await Sandbox.get(id, connectionFor(context, options));
      const created = await found.snapshots.create({ name: options.name, memory: options.fsOnly !== true });
      if (options.json === true) printJson(context, created);
      else context.stdout.write(`${created.id}\n`);
    });
  snapshot
    .command('ls')
    .description('list snapshots')
    .option('--sandbox <id>', 'only snapshots of this sandbox')
    .option('--json', 'print the snapshots as JSON')
    .action(async (_options: unknown, command: Command) => {
      const options = command.optsWithGlobals<GlobalOptions & { sandbox?: string; json?: boolean }>();
      const items = await listSnapshots(context, options);
      if (options.json === true) {
        printJson(context, items);
        return;
      }
      context.stdout.write(
        formatTable(
          ['ID', 'NAME', 'SANDBOX', 'MEMORY', 'IMAGE', 'DISK', 'CREATED'],
          items.map((item) => [
            item.id,
            item.name ?? '-',
            item.sandboxId,
            item.memory ? 'yes' : 'no',
            mib(item.imageSizeBytes),
            mib(item.diskSizeBytes),
            item.createdAt,
          ]),
        ),
      );
    });
  snapshot
    .command('info')
    .description('show one snapshot')
    .argument('<ref>', 'snapshot name or id')
    .option('--json', 'print the snapshot as JSON')
    .action(async (ref: string, _options: unknown, command: Command) => {
      const { Snapshots } = await loadSdk();
      const options = command.optsWithGlobals<GlobalOptions & { json?: boolean }>();
      const found = await Snapshots.connect(connectionFor(context, options)).get(ref);
      if (options.json === true) printJson(context, found);
      else context.stdout.write(describeSnapshot(found));
    });
  snapshot
    .command('rm')
    .alias('delete')
    .description('delete snapshots and their bytes; prints each deleted ref')
    .argument('<ref...>', 'snapshot names or ids')
    .action(async (refs: string[], _options: unknown, command: Command) => {
      const { Snapshots } = await loadSdk();
      const client = Snapshots.connect(connectionFor(context, command.optsWithGlobals<GlobalOptions>()));
      for (const ref of refs) {
        await client.delete(ref);
        context.stdout.write(`${ref}\n`);
      }
    });
}

async function listSnapshots(context: CliContext, options: GlobalOptions & { sandbox?: string }): Promise<Snapshot[]> {
  const { Sandbox, Snapshots } = await loadSdk();
  const connection = connectionFor(context, options);
  if (options.sandbox !== undefined) return (await Sandbox.get(options.sandbox, connection)).snapshots.list();
  return Snapshots.connect(connection).list();
}

function mib(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)}MiB`;
}

function describeSnapshot(info: Snapshot): string {
  const rows: Array<[string, string]> = [
    ['id', info.id],
    ['name', info.name ?? '-'],
    ['sandbox', info.sandboxId],
    ['template', `${info.template} (${info.templateId.slice(0, 12)})`],
    ['memory', info.memory ? 'yes (processes and memory)' : 'no (files only)'],
    ['image', mib(info.imageSizeBytes)],
    ['disk', mib(info.diskSizeBytes)],
    ['runtime', info.runtimeVersion],
    ['created', info.createdAt],
  ];
  // Only a server with its snapshots in S3 reports an upload.
  if (info.upload !== null) rows.push(['upload', describeUpload(info.upload)]);
  const width = Math.max(...rows.map(([key]) => key.length));
  return rows.map(([key, value]) => `${`${key}:`.padEnd(width + 2)}${value}\n`).join('');
}

/** `pending (12.0MiB left)`, `done`, or `failed (code: message; retrying)`. */
function describeUpload(upload: NonNullable<Snapshot['upload']>): string {
  if (upload.state === 'done') return 'done';
  if (upload.state === 'pending') return `pending (${mib(upload.bytesLeft)} left)`;
  return `failed (${upload.error?.code ?? 'unknown'}: ${upload.error?.message ?? ''}; retrying)`;
}
