import type { Writable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { Command } from 'commander';
import { type CliContext, connectionFor, formatTable, type GlobalOptions, loadSdk, printJson } from '../cli-context.js';

type JsonOption = GlobalOptions & { json?: boolean };

/** Node's fs and stream modules, loaded by the transfer commands only: importing them costs CPU at every start. */
async function loadNodeStreams() {
  const [fs, fsPromises, stream, streamPromises] = await Promise.all([
    import('node:fs'),
    import('node:fs/promises'),
    import('node:stream'),
    import('node:stream/promises'),
  ]);
  return {
    createReadStream: fs.createReadStream,
    mkdir: fsPromises.mkdir,
    stat: fsPromises.stat,
    Readable: stream.Readable,
    pipeline: streamPromises.pipeline,
  };
}

/** Registers `burrow files put|get|ls|rm|chmod|watch`. */
export function registerFilesCommands(program: Command, context: CliContext): void {
  const files = program
    .command('files')
    .description('copy files and directories to and from a sandbox, list, remove, chmod and watch');

  files
    .command('put')
    .description('upload a local file, or a directory as a streamed tar, into a sandbox (keeps permission bits)')
    .argument('<id>', 'sandbox id')
    .argument('<local>', 'local file or directory')
    .argument('<remote>', 'absolute path in the sandbox (for a directory: the directory to fill)')
    .option('--json', 'print the result as JSON')
    .action(async (id: string, local: string, remote: string, _options: unknown, command: Command) => {
      const { createReadStream, stat, Readable } = await loadNodeStreams();
      const { ByteProgress } = await import('../byte-progress.js');
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<JsonOption>();
      const info = await stat(local);
      const sandbox = await Sandbox.get(id, connectionFor(context, options));
      if (info.isDirectory()) {
        const progress = new ByteProgress(context.stderr, `${local} → ${id}:${remote}`, undefined);
        const { create: tarCreate } = await import('tar');
        // node-tar packs the local tree (portable: no uid/gid names); the server extracts it entry by entry.
        const tarStream = Readable.from(tarCreate({ cwd: local, portable: true }, ['.'])).pipe(progress.through());
        const result = await sandbox.files.upload(remote, tarStream);
        const skipped = result.issueCount === 0 ? '' : `, ${result.issueCount} entries skipped or changed`;
        progress.finish(`: ${result.files} files, ${result.directories} directories${skipped}`);
        if (options.json === true) printJson(context, result);
        for (const issue of result.issues) context.stderr.write(`  ${issue.action} ${issue.path}: ${issue.reason}\n`);
        return;
      }
      const progress = new ByteProgress(context.stderr, `${local} → ${id}:${remote}`, info.size);
      // 1 MiB reads: a sixteenth of the chunks (and per-chunk work) of the 64 KiB default (docs/files.md).
      const body = createReadStream(local, { highWaterMark: 1024 * 1024 }).pipe(progress.through());
      const written = await sandbox.files.write(remote, body, { mode: info.mode & 0o777 });
      progress.finish();
      if (options.json === true) printJson(context, written);
    });

  files
    .command('get')
    .description('download a file (to LOCAL, or stdout when LOCAL is - or left out) or a directory (into LOCAL)')
    .argument('<id>', 'sandbox id')
    .argument('<remote>', 'absolute path in the sandbox')
    .argument('[local]', 'local file or directory, or - for stdout')
    .action(async (id: string, remote: string, local: string | undefined, _options: unknown, command: Command) => {
      const { mkdir, Readable, pipeline } = await loadNodeStreams();
      const { ByteProgress } = await import('../byte-progress.js');
      const { Sandbox } = await loadSdk();
      const sandbox = await Sandbox.get(id, connectionFor(context, command.optsWithGlobals<GlobalOptions>()));
      const info = await sandbox.files.stat(remote);
      const toStdout = local === undefined || local === '-';
      if (info.type === 'directory') {
        const progress = new ByteProgress(context.stderr, `${id}:${remote} → ${local ?? '-'}`, undefined);
        const tar = Readable.fromWeb((await sandbox.files.download(remote)) as WebReadableStream<Uint8Array>);
        if (toStdout) {
          await pipeline(tar, progress.through(), context.stdout);
        } else {
          await mkdir(local, { recursive: true });
          const { extract: tarExtract } = await import('tar');
          // node-tar's extractor refuses `..`, absolute names and writes through symlinks by default.
          await pipeline(tar, progress.through(), tarExtract({ cwd: local }) as unknown as Writable);
        }
        progress.finish();
        return;
      }
      if (!toStdout) {
        // Straight into the file (readToFile: the socket read into reused buffers, no GC churn per chunk).
        const progress = new ByteProgress(context.stderr, `${id}:${remote} → ${local}`, info.sizeBytes);
        let reported = 0;
        await sandbox.files.readToFile(remote, local, {
          onProgress: (transferredBytes) => {
            progress.add(transferredBytes - reported);
            reported = transferredBytes;
          },
        });
        progress.finish();
        return;
      }
      const { stream, sizeBytes } = await sandbox.files.readStream(remote);
      const progress = new ByteProgress(context.stderr, `${id}:${remote} → -`, sizeBytes);
      const source = Readable.fromWeb(stream as WebReadableStream<Uint8Array>);
      await pipeline(source, progress.through(), context.stdout);
    });

  files
    .command('ls')
    .description('list a directory in a sandbox')
    .argument('<id>', 'sandbox id')
    .argument('[path]', 'absolute directory path', '/root')
    .option('--depth <n>', 'levels to recurse (default: 1)')
    .option('--json', 'print the entries as JSON')
    .action(async (id: string, path: string, _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<JsonOption & { depth?: string }>();
      const sandbox = await Sandbox.get(id, connectionFor(context, options));
      const entries = await sandbox.files.list(path, {
        depth: options.depth === undefined ? undefined : Number(options.depth),
      });
      if (options.json === true) {
        printJson(context, entries);
        return;
      }
      context.stdout.write(
        formatTable(
          ['TYPE', 'MODE', 'SIZE', 'MODIFIED', 'PATH'],
          entries.map((entry) => [
            entry.type,
            entry.mode.toString(8).padStart(4, '0'),
            String(entry.sizeBytes),
            entry.modifiedAt,
            entry.symlinkTarget === undefined ? entry.path : `${entry.path} -> ${entry.symlinkTarget}`,
          ]),
        ),
      );
    });

  files
    .command('rm')
    .alias('delete')
    .description('remove a file or symlink, or a directory with -r')
    .argument('<id>', 'sandbox id')
    .argument('<path>', 'absolute path in the sandbox')
    .option('-r, --recursive', 'remove a directory with its contents')
    .action(async (id: string, path: string, _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<GlobalOptions & { recursive?: boolean }>();
      const sandbox = await Sandbox.get(id, connectionFor(context, options));
      await sandbox.files.remove(path, { recursive: options.recursive === true });
    });

  files
    .command('chmod')
    .description('set permission bits, for example 755')
    .argument('<id>', 'sandbox id')
    .argument('<mode>', 'octal mode, for example 755 or 0644')
    .argument('<path>', 'absolute path in the sandbox')
    .action(async (id: string, mode: string, path: string, _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      if (!/^0?[0-7]{3,4}$/.test(mode)) throw new Error(`mode is octal, for example 755; got ${mode}`);
      const sandbox = await Sandbox.get(id, connectionFor(context, command.optsWithGlobals<GlobalOptions>()));
      await sandbox.files.chmod(path, Number.parseInt(mode, 8));
    });

  files
    .command('watch')
    .description('print create / modify / delete / rename events for a directory until interrupted')
    .argument('<id>', 'sandbox id')
    .argument('[path]', 'absolute directory path', '/root')
    .option('-r, --recursive', 'include subdirectories')
    .option('--json', 'print each event as a JSON line')
    .action(async (id: string, path: string, _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<JsonOption & { recursive?: boolean }>();
      const sandbox = await Sandbox.get(id, connectionFor(context, options));
      const abort = new AbortController();
      const stop = () => abort.abort();
      process.once('SIGINT', stop);
      try {
        for await (const event of sandbox.files.watch(path, {
          recursive: options.recursive === true,
          signal: abort.signal,
        })) {
          if (options.json === true) context.stdout.write(`${JSON.stringify(event)}\n`);
          else if (event.type === 'ready') context.stderr.write(`watching ${event.path}\n`);
          else if (event.type === 'end') context.stderr.write(`watch ended: ${event.reason}\n`);
          else if (event.type === 'rename') context.stdout.write(`rename ${event.oldPath} -> ${event.path}\n`);
          else context.stdout.write(`${event.type} ${event.path}${event.isDirectory ? '/' : ''}\n`);
        }
      } finally {
        process.off('SIGINT', stop);
      }
    });
}
