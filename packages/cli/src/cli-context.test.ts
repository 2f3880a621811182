import { describe, expect, it } from 'vitest';
import { formatTable } from './cli-context.js';
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
