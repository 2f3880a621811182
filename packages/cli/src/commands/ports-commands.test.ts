import { describe, expect, test } from 'vitest';
import { UsageError } from '../exit-codes.js';
import { parseDurationMs } from './ports-commands.js';

describe('burrow ports url --ttl', () => {
  test('durations in ms, s, m, h, d; a bare number is ms', () => {
    expect(parseDurationMs('1h', '--ttl')).toBe(3_600_000);
    expect(parseDurationMs('90s', '--ttl')).toBe(90_000);
    expect(parseDurationMs('15m', '--ttl')).toBe(900_000);
    expect(parseDurationMs('2d', '--ttl')).toBe(172_800_000);
    expect(parseDurationMs('1500', '--ttl')).toBe(1500);
    expect(parseDurationMs('0.5h', '--ttl')).toBe(1_800_000);
  });

  test('anything else is a usage error naming the flag', () => {
    for (const text of ['', 'h', '1w', '-1h', '1 hour']) {
      expect(() => parseDurationMs(text, '--ttl')).toThrow(UsageError);
    }
  });
});
