import type { BuildTemplateRequest } from '@burrow/sdk';
import type { Command } from 'commander';
import { type CliContext, connectionFor, formatTable, type GlobalOptions, loadSdk, printJson } from '../cli-context.js';
import { ProgressSpinner } from '../progress-spinner.js';

interface BuildOptions extends GlobalOptions {
  from?: string;
  apt?: string[];
  run?: string[];
  json?: boolean;
}

/** Registers `burrow template build|ls|rm`. */
export function registerTemplateCommands(program: Command, context: CliContext): void {
  const template = program.command('template').description('build, list and remove templates');

  template
    .command('build')
    .description('build a template from a parent plus apt packages and shell commands (progress on stderr)')
    .argument('<name>', 'template name')
    .option('--from <parent>', 'parent template (default: base)')
    .option('--apt <packages...>', 'Debian packages to install')
    .option('--run <commands...>', 'shell commands to run, in order')
    .option('--json', 'print the template as JSON')
    .action(async (name: string, _options: unknown, command: Command) => {
      const { BurrowClient } = await loadSdk();
      const options = command.optsWithGlobals<BuildOptions>();
      const request: BuildTemplateRequest = { name, apt: options.apt ?? [], run: options.run ?? [] };
      if (options.from !== undefined) request.from = options.from;
      const client = new BurrowClient(connectionFor(context, options));
      const spinner = new ProgressSpinner(context.stderr, `building template ${name}`);
      spinner.start();
      try {
        const built = await client.templates.build(request, { onLog: (line) => spinner.update(line) });
        spinner.stop(true, `(${formatBytes(built.sizeBytes)})`);
        if (options.json === true) printJson(context, built);
        else context.stdout.write(`${built.name}\n`);
      } catch (err) {
        spinner.stop(false);
        throw err;
      }
    });

  template
    .command('ls')
    .description('list templates')
    .option('--json', 'print the templates as JSON')
    .action(async (_options: unknown, command: Command) => {
      const { BurrowClient } = await loadSdk();
      const options = command.optsWithGlobals<GlobalOptions & { json?: boolean }>();
      const items = await new BurrowClient(connectionFor(context, options)).templates.list();
      if (options.json === true) {
        printJson(context, items);
        return;
      }
      context.stdout.write(
        formatTable(
          ['NAME', 'STATE', 'FROM', 'SIZE', 'CREATED'],
          items.map((item) => [item.name, item.state, item.from ?? '-', formatBytes(item.sizeBytes), item.createdAt]),
        ),
      );
    });

  template
    .command('rm')
    .alias('delete')
    .description('delete templates; prints each deleted name')
    .argument('<name...>', 'template names')
    .action(async (names: string[], _options: unknown, command: Command) => {
      const { BurrowClient } = await loadSdk();
      const client = new BurrowClient(connectionFor(context, command.optsWithGlobals<GlobalOptions>()));
      for (const name of names) {
        await client.templates.delete(name);
        context.stdout.write(`${name}\n`);
      }
    });
}

/** Bytes as a short human string (`1.5 GiB`). */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}
