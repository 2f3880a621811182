import type { Command } from 'commander';
import { type CliContext, connectionFor, type GlobalOptions } from '../cli-context.js';

/**
 * Registers `burrow mcp`: Burrow's sandbox tools for an MCP client over stdio. The MCP code loads in the action only,
 * so no other command pays for it (`burrow exec` keeps its lean start, checked by startup-imports.test.ts).
 */
export function registerMcpCommand(program: Command, context: CliContext): void {
  program
    .command('mcp')
    .description('serve the sandbox tools to an MCP client over stdio (docs/mcp.md); stdout carries only MCP messages')
    .action(async (_options: unknown, command: Command) => {
      const connection = connectionFor(context, command.optsWithGlobals<GlobalOptions>());
      const { serveStdio } = await import('@burrow/mcp');
      if (connection.apiKey === undefined) {
        context.stderr.write(
          'burrow mcp: no API key (set BURROW_API_KEY or pass --api-key); every tool call will fail with unauthorized\n',
        );
      }
      await serveStdio(connection, { stdin: context.stdin, stdout: context.stdout });
    });
}
