import type { SandboxInspection } from '@burrow/sdk';
import type { Command } from 'commander';
import { type CliContext, connectionFor, formatTable, type GlobalOptions, loadSdk, printJson } from '../cli-context.js';
import { parsePositiveInt } from '../key-value-parse.js';

/** Registers `burrow reset ID [--snapshot NAME [--fs-only]]`, `burrow quarantine ID [--release]`, `burrow inspect ID`. */
export function registerHygieneCommands(program: Command, context: CliContext): void {
  program
    .command('reset')
    .description('reset a sandbox to a fresh disk and boot of its template, or to a snapshot; keeps its id')
    .argument('<id>', 'sandbox id')
    .option('--snapshot <name>', 'reset to this snapshot (name or snp_ id) instead of the template')
    .option('--fs-only', 'with --snapshot: its files only, boot fresh (no processes and memory)')
    .option('--json', 'print the sandbox as JSON')
    .action(async (id: string, _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<
        GlobalOptions & { snapshot?: string; fsOnly?: boolean; json?: boolean }
      >();
      const sandbox = await Sandbox.get(id, connectionFor(context, options));
      const info = await sandbox.reset(
        options.snapshot === undefined
          ? { to: 'template' }
          : { to: 'snapshot', snapshot: options.snapshot, memory: options.fsOnly !== true },
      );
      if (options.json === true) printJson(context, info);
      else context.stdout.write(`${info.id}\n`);
    });

  program
    .command('quarantine')
    .description('set a sandbox aside (no exec or writes except by an admin key, no policies), or --release it')
    .argument('<id>', 'sandbox id')
    .option('--reason <text>', 'why (shown in info)')
    .option('--release', 'lift the quarantine (admin key)')
    .option('--json', 'print the sandbox as JSON')
    .action(async (id: string, _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<GlobalOptions & { reason?: string; release?: boolean; json?: boolean }>();
      const sandbox = await Sandbox.get(id, connectionFor(context, options));
      const info =
        options.release === true ? await sandbox.release() : await sandbox.quarantine({ reason: options.reason });
      if (options.json === true) printJson(context, info);
      else context.stdout.write(`${info.id}\n`);
    });

  program
    .command('inspect')
    .description('disk used by directory and files changed since the template (running, paused or stopped)')
    .argument('<id>', 'sandbox id')
    .option('--limit <n>', 'most changed paths listed (default 1000)')
    .option('--depth <n>', 'directory levels in the usage table (1-4, default 2)')
    .option('--json', 'print the inspection as JSON')
    .action(async (id: string, _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<GlobalOptions & { limit?: string; depth?: string; json?: boolean }>();
      const sandbox = await Sandbox.get(id, connectionFor(context, options));
      const query: { limit?: number; depth?: number } = {};
      if (options.limit !== undefined) query.limit = parsePositiveInt(options.limit, '--limit');
      if (options.depth !== undefined) query.depth = parsePositiveInt(options.depth, '--depth');
      const found = await sandbox.inspect(query);
      if (options.json === true) printJson(context, found);
      else context.stdout.write(renderInspection(found));
    });
}

/** Human-readable inspection: usage, top directories, then the changes. */
export function renderInspection(found: SandboxInspection): string {
  const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
  const { counts } = found.changes;
  const lines = [
    `${found.sandboxId} (${found.state}): ${mib(found.disk.usedBytes)} written of ${mib(found.disk.limitBytes)}`,
    `changes since the template: ${counts.added} added, ${counts.modified} modified, ${counts.deleted} deleted${found.changes.truncated ? ' (list truncated)' : ''}`,
    '',
    formatTable(
      ['DIRECTORY', 'SIZE'],
      found.disk.directories.map((d) => [d.path, mib(d.bytes)]),
    ),
    '',
    formatTable(
      ['CHANGE', 'TYPE', 'SIZE', 'PATH'],
      found.changes.items.map((c) => [c.kind, c.type, String(c.sizeBytes), c.path]),
    ),
  ];
  return `${lines.join('\n').trimEnd()}\n`;
}
