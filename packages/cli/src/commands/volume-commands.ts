import type { Writable } from 'node:stream';
import type { VolumeInfo } from '@burrow/sdk';
import type { Command } from 'commander';
import { type CliContext, connectionFor, formatTable, type GlobalOptions, loadSdk, printJson } from '../cli-context.js';
import { UsageError } from '../exit-codes.js';
import { collect, keyValueRecord, parsePositiveInt } from '../key-value-parse.js';

/**
 * `--volume NAME:/path[:ro]` of `burrow sandbox create`, as the create request's `volumes` entry.
 * @throws UsageError for any other form
 */
export function parseVolumeFlag(text: string): { name: string; path: string; readOnly: boolean } {
  const [name, path, mode, ...rest] = text.split(':');
  if (name === undefined || name === '' || path === undefined || path === '' || rest.length > 0) {
    throw new UsageError(
      `--volume "${text}" is not NAME:/path or NAME:/path:ro`,
      'for example --volume cache:/cache:ro',
    );
  }
  if (mode !== undefined && mode !== 'ro' && mode !== 'rw') {
    throw new UsageError(
      `--volume "${text}" ends in "${mode}"`,
      'end it in :ro for read-only, :rw or nothing for read-write',
    );
  }
  return { name, path, readOnly: mode === 'ro' };
}

function rows(items: readonly VolumeInfo[]): string[][] {
  return items.map((v) => [
    v.id,
    v.name,
    v.kind,
    `${v.sizeMiB}`,
    v.usedBytes === null ? '-' : `${Math.ceil(v.usedBytes / 1048576)}`,
    v.shared ? 'yes' : 'no',
    v.mounts.map((m) => `${m.sandboxId}:${m.path}${m.readOnly ? ':ro' : ''}`).join(',') || '-',
  ]);
}

/** Node's stream modules, loaded by the file commands only (each module costs start-up CPU). */
async function io() {
  const [fs, stream, promises] = await Promise.all([
    import('node:fs'),
    import('node:stream'),
    import('node:stream/promises'),
  ]);
  return {
    createReadStream: fs.createReadStream,
    createWriteStream: fs.createWriteStream,
    Readable: stream.Readable,
    pipeline: promises.pipeline,
  };
}

const HEADER = ['ID', 'NAME', 'KIND', 'SIZE MIB', 'USED MIB', 'SHARED', 'MOUNTS'];

/** Registers `burrow volume create|ls|info|rm|resize|snapshot|fork|files`. */
export function registerVolumeCommands(program: Command, context: CliContext): void {
  const volume = program.command('volume').description('named storage that outlives sandboxes (docs/volumes.md)');
  type Opts = GlobalOptions & { json?: boolean };
  const sdk = async (command: Command) => {
    const { Volume } = await loadSdk();
    const options = command.optsWithGlobals<Opts & Record<string, unknown>>();
    return { Volume, options, connection: connectionFor(context, options) };
  };
  const show = (options: Opts, info: VolumeInfo) => {
    if (options.json === true) printJson(context, info);
    else context.stdout.write(formatTable(HEADER, rows([info])));
  };

  volume
    .command('create <name>')
    .description('create a volume; prints its id')
    .requiredOption('--size <mib>', 'size in MiB (a write past it fails with ENOSPC)')
    .option('--shared', 'several sandboxes may mount it read-write at once')
    .option('--label <K=V>', 'label (repeatable)', collect)
    .option('--json', 'print the volume as JSON')
    .action(async (name: string, _o: unknown, command: Command) => {
      const { Volume, options, connection } = await sdk(command);
      const created = await Volume.create({
        ...connection,
        name,
        sizeMiB: parsePositiveInt(String(options.size), '--size'),
        shared: options.shared === true,
        labels: keyValueRecord(options.label as string[] | undefined, 'label'),
      });
      if (options.json === true) printJson(context, created.info);
      else context.stdout.write(`${created.id}\n`);
    });

  volume
    .command('ls')
    .description('list volumes and volume snapshots')
    .option('--kind <kind>', 'volume or snapshot')
    .option('--label <K=V>', 'only volumes with this label (repeatable)', collect)
    .option('--json', 'print the volumes as JSON')
    .action(async (_o: unknown, command: Command) => {
      const { Volume, options, connection } = await sdk(command);
      const kind = options.kind as string | undefined;
      if (kind !== undefined && kind !== 'volume' && kind !== 'snapshot') {
        throw new UsageError(`unknown kind "${kind}"`, 'use volume or snapshot');
      }
      const items: VolumeInfo[] = [];
      let cursor: string | undefined;
      do {
        const page = await Volume.list({
          ...connection,
          kind,
          labels: (options.label as string[] | undefined) ?? [],
          limit: 200,
          cursor,
        });
        items.push(...page.items);
        cursor = page.nextCursor ?? undefined;
      } while (cursor !== undefined);
      if (options.json === true) printJson(context, items);
      else context.stdout.write(formatTable(HEADER, rows(items)));
    });

  volume
    .command('info <name>')
    .description('show a volume: size, bytes used, mounts, lineage')
    .option('--json', 'print the volume as JSON')
    .action(async (name: string, _o: unknown, command: Command) => {
      const { Volume, options, connection } = await sdk(command);
      const found = await Volume.get(name, connection);
      if (options.json === true) {
        printJson(context, found.info);
        return;
      }
      context.stdout.write(formatTable(HEADER, rows([found.info])));
      const { sourceId, copyMethod } = found.info.lineage;
      if (sourceId !== null) context.stdout.write(`copied from ${sourceId} (${copyMethod ?? 'copy'})\n`);
    });

  volume
    .command('rm <name>')
    .alias('delete')
    .description('delete a volume (refused while mounted)')
    .option('--force', 'detach it from stopped and paused sandboxes first')
    .action(async (name: string, _o: unknown, command: Command) => {
      const { Volume, options, connection } = await sdk(command);
      await (await Volume.get(name, connection)).delete({ force: options.force === true });
    });

  volume
    .command('resize <name>')
    .description('grow a volume')
    .requiredOption('--size <mib>', 'the new size in MiB (at least the current one)')
    .option('--json', 'print the volume as JSON')
    .action(async (name: string, _o: unknown, command: Command) => {
      const { Volume, options, connection } = await sdk(command);
      const found = await Volume.get(name, connection);
      show(options, await found.resize(parsePositiveInt(String(options.size), '--size')));
    });

  for (const verb of ['snapshot', 'fork'] as const) {
    volume
      .command(`${verb} <name>`)
      .description(verb === 'snapshot' ? 'take a read-only point-in-time copy' : 'make a writable copy that diverges')
      .requiredOption('--as <new>', `name of the ${verb}`)
      .option('--json', 'print the new volume as JSON')
      .action(async (name: string, _o: unknown, command: Command) => {
        const { Volume, options, connection } = await sdk(command);
        const found = await Volume.get(name, connection);
        const made =
          verb === 'snapshot' ? await found.snapshot(String(options.as)) : await found.fork(String(options.as));
        if (options.json === true) printJson(context, made.info);
        else context.stdout.write(`${made.id}\n`);
      });
  }

  const files = volume.command('files').description("a volume's files without a sandbox");
  files
    .command('ls <name> [path]')
    .description('list a directory of the volume (default /)')
    .option('--json', 'print the entries as JSON')
    .action(async (name: string, path: string | undefined, _o: unknown, command: Command) => {
      const { Volume, options, connection } = await sdk(command);
      const items = await (await Volume.get(name, connection)).files.list(path ?? '/');
      if (options.json === true) printJson(context, items);
      else
        context.stdout.write(
          formatTable(
            ['TYPE', 'SIZE', 'PATH'],
            items.map((i) => [i.type, `${i.sizeBytes}`, i.path]),
          ),
        );
    });
  files
    .command('put <name> <local> <path>')
    .description('write a local file (- for stdin) into the volume')
    .action(async (name: string, local: string, path: string, _o: unknown, command: Command) => {
      const { Volume, connection } = await sdk(command);
      const { createReadStream } = await io();
      const source = local === '-' ? context.stdin : createReadStream(local);
      await (await Volume.get(name, connection)).files.write(path, source as AsyncIterable<Uint8Array>);
    });
  files
    .command('get <name> <path> [local]')
    .description('read a file of the volume to a local file (default stdout)')
    .action(async (name: string, path: string, local: string | undefined, _o: unknown, command: Command) => {
      const { Volume, connection } = await sdk(command);
      const { createWriteStream, Readable, pipeline } = await io();
      const { stream } = await (await Volume.get(name, connection)).files.readStream(path);
      const target = local === undefined ? context.stdout : createWriteStream(local);
      await pipeline(Readable.fromWeb(stream as never), target as Writable);
    });
  files
    .command('rm <name> <path>')
    .alias('delete')
    .description('remove a file or (--recursive) a directory of the volume')
    .option('--recursive', 'remove a directory with its contents')
    .action(async (name: string, path: string, _o: unknown, command: Command) => {
      const { Volume, options, connection } = await sdk(command);
      await (await Volume.get(name, connection)).files.remove(path, { recursive: options.recursive === true });
    });
  files
    .command('tar-out <name> <path> <local>')
    .description('download a directory of the volume as a tar file')
    .action(async (name: string, path: string, local: string, _o: unknown, command: Command) => {
      const { Volume, connection } = await sdk(command);
      const { createWriteStream, Readable, pipeline } = await io();
      const stream = await (await Volume.get(name, connection)).files.download(path);
      await pipeline(Readable.fromWeb(stream as never), createWriteStream(local));
    });
  files
    .command('tar-in <name> <local> <path>')
    .description('extract a local tar (gzip detected) into a directory of the volume')
    .action(async (name: string, local: string, path: string, _o: unknown, command: Command) => {
      const { Volume, connection } = await sdk(command);
      const { createReadStream } = await io();
      const result = await (await Volume.get(name, connection)).files.upload(
        path,
        createReadStream(local) as AsyncIterable<Uint8Array>,
      );
      for (const issue of result.issues) context.stderr.write(`  ${issue.action} ${issue.path}: ${issue.reason}\n`);
    });
}
