import { PassThrough } from 'node:stream';
import type { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { buildProgram, type ProgramContext } from './program.js';

function commandPaths(command: Command, prefix: string[] = []): Array<{ path: string[]; command: Command }> {
  return command.commands.flatMap((child) => {
    const path = [...prefix, child.name()];
    return [{ path, command: child }, ...commandPaths(child, path)];
  });
}

describe('buildProgram', () => {
  it('gives every rm subcommand a delete alias', () => {
    const context: ProgramContext = {
      env: {},
      stdout: new PassThrough(),
      stderr: new PassThrough(),
      stdin: process.stdin,
      readFile: () => '',
      exitCode: 0,
      onShutdown: () => {},
    };
    const removals = commandPaths(buildProgram(context, '0.0.0')).filter(({ path }) => path.at(-1) === 'rm');
    expect(removals.map(({ path }) => path.join(' '))).toEqual(
      expect.arrayContaining(['sandbox rm', 'snapshot rm', 'files rm', 'template rm', 'webhooks rm']),
    );
    for (const { path, command } of removals) expect(command.aliases(), path.join(' ')).toContain('delete');
  });
});
