import { Command } from 'commander';
import type { CliContext } from './cli-context.js';
import { registerBucketCommands } from './commands/bucket-commands.js';
import { registerE2bCommands } from './commands/e2b-commands.js';
import { registerExecCommand } from './commands/exec-command.js';
import { registerFilesCommands } from './commands/files-commands.js';
import { registerGovernanceCommands } from './commands/governance-commands.js';
import { registerHygieneCommands } from './commands/hygiene-commands.js';
import { registerKeysCommands } from './commands/keys-commands.js';
import { registerLifecycleCommands } from './commands/lifecycle-commands.js';
import { registerMcpCommand } from './commands/mcp-command.js';
import { registerNetworkCommands } from './commands/network-commands.js';
import { registerPersistenceCommands } from './commands/persistence-commands.js';
import { registerPortsCommands } from './commands/ports-commands.js';
import { registerProcessCommands } from './commands/process-commands.js';
import { registerSandboxCommands } from './commands/sandbox-commands.js';
import { registerSecretsCommands } from './commands/secrets-commands.js';
import { registerServerCommands } from './commands/server-commands.js';
import { registerTemplateCommands } from './commands/template-commands.js';
import { registerTenantCommands } from './commands/tenant-commands.js';
import { registerUiCommand } from './commands/ui-command.js';
import { registerVolumeCommands } from './commands/volume-commands.js';

/** Mutable outcome of one CLI run, written by commands that choose their own exit code. */
export interface ProgramContext extends CliContext {
  exitCode: number;
  onShutdown: (handler: () => Promise<void>) => void;
}

/** Builds the `burrow` command tree. Commander errors are thrown (`exitOverride`), never `process.exit`ed. */
export function buildProgram(context: ProgramContext, version: string): Command {
  const program = new Command('burrow')
    .description('Burrow: persistent, isolated sandboxes for AI agents (gVisor)')
    .version(version)
    .option('--url <url>', 'server URL (default: BURROW_URL or http://127.0.0.1:7420)')
    .option('--api-key <key>', 'API key (default: BURROW_API_KEY, else <BURROW_DATA_DIR>/admin-key)')
    .option('--as-tenant <id>', "tenant to act for, with an admin key (default: BURROW_TENANT, else the key's own)")
    .showHelpAfterError('(run with --help for usage)')
    .exitOverride()
    .configureOutput({
      writeOut: (text) => context.stdout.write(text),
      writeErr: (text) => context.stderr.write(text),
    });
  registerSandboxCommands(program, context);
  registerPersistenceCommands(program, context);
  registerHygieneCommands(program, context);
  registerExecCommand(program, context);
  registerProcessCommands(program, context);
  registerFilesCommands(program, context);
  registerTemplateCommands(program, context);
  registerKeysCommands(program, context);
  registerGovernanceCommands(program, context);
  registerLifecycleCommands(program, context);
  registerNetworkCommands(program, context);
  registerPortsCommands(program, context);
  registerSecretsCommands(program, context);
  registerBucketCommands(program, context);
  registerTenantCommands(program, context);
  registerServerCommands(program, context);
  registerE2bCommands(program, context);
  registerMcpCommand(program, context);
  registerUiCommand(program, context);
  registerVolumeCommands(program, context);
  for (const command of program.commands) applyToTree(command, (c) => c.exitOverride());
  return program;
}

function applyToTree(command: Command, apply: (command: Command) => void): void {
  apply(command);
  for (const child of command.commands) applyToTree(child, apply);
}
