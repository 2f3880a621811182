import type { SyncResult } from '@burrow/sdk';
import type { Command } from 'commander';
import { type CliContext, connectionFor, formatTable, type GlobalOptions, loadSdk, printJson } from '../cli-context.js';
import { UsageError } from '../exit-codes.js';

/** Read all of stdin as text, without its final newline (the secret of `--secret-key-stdin`). */
async function readSecret(stdin: NodeJS.ReadStream): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks)
    .toString('utf8')
    .replace(/\r?\n$/, '');
}

/** `s3://NAME/prefix` → the bucket name and prefix. @throws UsageError */
export function parseBucketUrl(url: string): { bucket: string; prefix: string } {
  const match = /^s3:\/\/([a-z0-9][a-z0-9-]{0,62})(?:\/(.*))?$/.exec(url);
  if (match === null) {
    throw new UsageError(`not a bucket URL: ${url}`, 'use s3://NAME/prefix, NAME as in `burrow buckets list`');
  }
  return { bucket: match[1] as string, prefix: (match[2] ?? '').replace(/^\/+|\/+$/g, '') };
}

/** One line per moved file for `burrow sync`. */
function describeSync(result: SyncResult): string {
  const lines = [
    ...result.uploaded.map((p) => `up      ${p}`),
    ...result.downloaded.map((p) => `down    ${p}`),
    ...result.deletedRemote.map((p) => `rm s3   ${p}`),
    ...result.deletedLocal.map((p) => `rm box  ${p}`),
    ...result.conflicts.map((c) => `conflict ${c.path}: ${c.winner} won, older kept as ${c.keptAs}`),
    ...result.skipped.map((p) => `skipped ${p} (not a regular file)`),
  ];
  lines.push(`${result.bytesUp} bytes up, ${result.bytesDown} bytes down`);
  return `${lines.join('\n')}\n`;
}

/** Registers `burrow buckets add|list|remove` and `burrow sync`. */
export function registerBucketCommands(program: Command, context: CliContext): void {
  const buckets = program.command('buckets').description('named S3 bucket credentials held by the server');
  buckets
    .command('add')
    .description('check and keep credentials of a bucket under NAME (the secret is read from stdin)')
    .argument('<name>', 'the name sandboxes use: s3://NAME/prefix')
    .requiredOption('--endpoint <url>', 'the S3 service URL, e.g. https://s3.eu-west-1.amazonaws.com')
    .option('--region <region>', 'signing region', 'us-east-1')
    .option('--bucket <bucket>', "the bucket's name at the service (default: NAME)")
    .requiredOption('--access-key <id>', 'access key id')
    .option('--secret-key-stdin', 'read the secret access key from stdin (the only way to pass it)')
    .option('--path-style', 'path-style addressing (MinIO, Swift)')
    .option('--json', 'print the bucket as JSON')
    .action(async (name: string, _options: unknown, command: Command) => {
      const options = command.optsWithGlobals<
        GlobalOptions & {
          endpoint: string;
          region: string;
          bucket?: string;
          accessKey: string;
          secretKeyStdin?: boolean;
          pathStyle?: boolean;
          json?: boolean;
        }
      >();
      if (options.secretKeyStdin !== true) {
        throw new UsageError(
          'the secret key is missing',
          'pipe it in: `printf %s "$SECRET" | burrow buckets add ... --secret-key-stdin`',
        );
      }
      const secretAccessKey = await readSecret(context.stdin);
      const { BurrowClient } = await loadSdk();
      const added = await new BurrowClient(connectionFor(context, options)).buckets.add({
        name,
        endpoint: options.endpoint,
        region: options.region,
        ...(options.bucket === undefined ? {} : { bucket: options.bucket }),
        accessKeyId: options.accessKey,
        secretAccessKey,
        pathStyle: options.pathStyle === true,
      });
      if (options.json === true) printJson(context, added);
      else context.stdout.write(`${added.name}\n`);
    });
  buckets
    .command('list')
    .description('list the named buckets (never their secrets)')
    .option('--json', 'print JSON')
    .action(async (_options: unknown, command: Command) => {
      const options = command.optsWithGlobals<GlobalOptions & { json?: boolean }>();
      const { BurrowClient } = await loadSdk();
      const items = await new BurrowClient(connectionFor(context, options)).buckets.list();
      if (options.json === true) printJson(context, items);
      else {
        context.stdout.write(
          formatTable(
            ['NAME', 'BUCKET', 'ENDPOINT', 'ACCESS KEY'],
            items.map((b) => [b.name, b.bucket, b.endpoint, b.accessKeyId]),
          ),
        );
      }
    });
  buckets
    .command('remove')
    .description('remove named bucket credentials')
    .argument('<name>')
    .action(async (name: string, _options: unknown, command: Command) => {
      const options = command.optsWithGlobals<GlobalOptions>();
      const { BurrowClient } = await loadSdk();
      await new BurrowClient(connectionFor(context, options)).buckets.remove(name);
    });
  program
    .command('sync')
    .description(
      'sync a sandbox directory with s3://NAME/prefix: --up, --down or --both (newest wins; the older copy kept as NAME.conflict-<time>)',
    )
    .argument('<id>', 'sandbox id')
    .argument('<path>', 'directory in the sandbox')
    .argument('<url>', 's3://NAME/prefix, NAME from `burrow buckets list`')
    .option('--up', 'sandbox → bucket')
    .option('--down', 'bucket → sandbox')
    .option('--both', 'both ways, changes since the last sync')
    .option('--delete', 'also remove files the sending side no longer has')
    .option('--json', 'print the result as JSON')
    .action(async (id: string, path: string, url: string, _options: unknown, command: Command) => {
      const options = command.optsWithGlobals<
        GlobalOptions & { up?: boolean; down?: boolean; both?: boolean; delete?: boolean; json?: boolean }
      >();
      const chosen = (['up', 'down', 'both'] as const).filter((d) => options[d] === true);
      if (chosen.length !== 1) throw new UsageError('pick one direction', 'pass exactly one of --up, --down, --both');
      const { Sandbox } = await loadSdk();
      const sandbox = await Sandbox.get(id, connectionFor(context, options));
      const result = await sandbox.sync({
        path,
        ...parseBucketUrl(url),
        direction: chosen[0] as 'up' | 'down' | 'both',
        delete: options.delete === true,
      });
      if (options.json === true) printJson(context, result);
      else context.stdout.write(describeSync(result));
    });
}
