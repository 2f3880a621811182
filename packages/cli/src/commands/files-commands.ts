import { once } from 'node:events';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { Sandbox } from '@burrow/sdk';
import type { Command } from 'commander';
import { type CliContext, connectionFor, formatTable, type GlobalOptions, printJson } from '../cli-context.js';

/** Registers `burrow files put|get|ls`. */
export function registerFilesCommands(program: Command, context: CliContext): void {
  const files = program.command('files').description('copy files to and from a sandbox, list directories');

  files
    .command('put')
    .description('upload a local file into a sandbox (keeps its permission bits)')
    .argument('<id>', 'sandbox id')
    .argument('<local>', 'local file')
    .argument('<remote>', 'absolute path in the sandbox')
    .option('--json', 'print the written file info as JSON')
    .action(async (id: string, local: string, remote: string, _options: unknown, command: Command) => {
      const options = command.optsWithGlobals<GlobalOptions & { json?: boolean }>();
      const [data, info] = await Promise.all([readFile(local), stat(local)]);
      const sandbox = await Sandbox.get(id, connectionFor(context, options));
      const written = await sandbox.files.write(remote, data, { mode: info.mode & 0o777 });
      if (options.json === true) printJson(context, written);
      else context.stderr.write(`${local} → ${id}:${written.path} (${written.sizeBytes} bytes)\n`);
    });

  files
    .command('get')
    .description('download a file from a sandbox to LOCAL, or to stdout when LOCAL is - or left out')
    .argument('<id>', 'sandbox id')
    .argument('<remote>', 'absolute path in the sandbox')
    .argument('[local]', 'local file, or - for stdout')
    .action(async (id: string, remote: string, local: string | undefined, _options: unknown, command: Command) => {
      const sandbox = await Sandbox.get(id, connectionFor(context, command.optsWithGlobals<GlobalOptions>()));
      const data = await sandbox.files.read(remote);
      if (local === undefined || local === '-') {
        if (!context.stdout.write(data)) await once(context.stdout, 'drain');
      } else {
        await writeFile(local, data);
        context.stderr.write(`${id}:${remote} → ${local} (${data.byteLength} bytes)\n`);
      }
    });

  files
    .command('ls')
    .description('list a directory in a sandbox')
    .argument('<id>', 'sandbox id')
    .argument('[path]', 'absolute directory path', '/root')
    .option('--depth <n>', 'levels to recurse (default: 1)')
    .option('--json', 'print the entries as JSON')
    .action(async (id: string, path: string, _options: unknown, command: Command) => {
      const options = command.optsWithGlobals<GlobalOptions & { json?: boolean; depth?: string }>();
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
}
