import { spawn } from 'node:child_process';
import type { Command } from 'commander';
import { type CliContext, connectionFor, type GlobalOptions, loadSdk } from '../cli-context.js';

/** Registers `burrow ui`: print (and, where a desktop is, open) a one-time login link to the web console. */
export function registerUiCommand(program: Command, context: CliContext): void {
  program
    .command('ui')
    .description('print a one-time link (5 minutes) that signs a browser in to the web console as your key')
    .option('--no-open', 'only print the link, do not start a browser')
    .action(async (_options: unknown, command: Command) => {
      const { BurrowClient } = await loadSdk();
      const options = command.optsWithGlobals<GlobalOptions & { open?: boolean }>();
      const link = await new BurrowClient(connectionFor(context, options)).keys.consoleLoginLink();
      context.stdout.write(`${link.url}\n`);
      context.stderr.write(`the link signs in once, until ${link.expiresAt}\n`);
      const desktop = (context.env.DISPLAY ?? context.env.WAYLAND_DISPLAY ?? '') !== '';
      if (options.open !== false && desktop) openBrowser(link.url);
    });
}

/** Start the desktop's browser on `url`; a missing `xdg-open` only means the user opens the printed link. */
function openBrowser(url: string): void {
  const child = spawn('xdg-open', [url], { detached: true, stdio: 'ignore' });
  child.on('error', () => undefined);
  child.unref();
}
