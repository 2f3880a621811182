import { describe, expect, it } from 'vitest';
import { type CliContext, connectionFor, formatTable } from './cli-context.js';
import { commandFromArgs } from './commands/exec-command.js';

describe('formatTable', () => {
  it('pads every column but the last', () => {
    expect(
      formatTable(
        ['ID', 'STATE', 'LABELS'],
        [
          ['sbx_1', 'running', 'a=b'],
          ['sbx_22', 'paused', ''],
        ],
      ),
    ).toBe('ID      STATE    LABELS\nsbx_1   running  a=b\nsbx_22  paused\n');
  });
});

describe('commandFromArgs', () => {
  it('keeps argv as is', () => {
    expect(commandFromArgs(['python3', '-c', 'print(6*7)'])).toEqual(['python3', '-c', 'print(6*7)']);
    expect(commandFromArgs(['ls'])).toEqual(['ls']);
  });

  it('runs one argument with whitespace through the shell', () => {
    expect(commandFromArgs(['echo hi > /tmp/x'])).toBe('echo hi > /tmp/x');
  });
});

describe('connectionFor', () => {
  const context = (env: Record<string, string>) => ({ env, readFile: () => 'bk_file' }) as unknown as CliContext;
  it("acts for --as-tenant, else BURROW_TENANT, else the key's own tenant", () => {
    expect(connectionFor(context({ BURROW_TENANT: 'b' }), { apiKey: 'bk_x', asTenant: 'a' }).tenantId).toBe('a');
    expect(connectionFor(context({ BURROW_TENANT: 'b' }), { apiKey: 'bk_x' }).tenantId).toBe('b');
    expect(connectionFor(context({ BURROW_TENANT: '' }), { apiKey: 'bk_x' }).tenantId).toBeUndefined();
    expect(connectionFor(context({}), { apiKey: 'bk_x' })).toMatchObject({ apiKey: 'bk_x', tenantId: undefined });
  });
});
