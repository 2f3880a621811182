import { describe, expect, it } from 'vitest';
import { UsageError } from './exit-codes.js';
import {
  collect,
  keyValueRecord,
  parseDurationMs,
  parseKeyValue,
  parsePositiveInt,
  parsePositiveNumber,
} from './key-value-parse.js';

describe('parseKeyValue', () => {
  it.each([
    ['A=1', ['A', '1']],
    ['A=', ['A', '']],
    ['URL=http://x/?a=b', ['URL', 'http://x/?a=b']],
    ['team/name=a b', ['team/name', 'a b']],
  ])('%s', (text, expected) => {
    expect(parseKeyValue(text)).toEqual(expected);
  });

  it.each(['A', '=1', ''])('rejects %j as a usage error', (text) => {
    expect(() => parseKeyValue(text, 'env')).toThrow(UsageError);
  });
});

describe('keyValueRecord', () => {
  it('collects repeated options, later keys win', () => {
    const items = collect('B=3', collect('B=2', collect('A=1', undefined)));
    expect(keyValueRecord(items, 'env')).toEqual({ A: '1', B: '3' });
  });

  it('is empty without options', () => {
    expect(keyValueRecord(undefined, 'label')).toEqual({});
  });
});

describe('number options', () => {
  it('parses positive integers only', () => {
    expect(parsePositiveInt('5000', '--timeout')).toBe(5000);
    for (const bad of ['0', '-1', '1.5', 'ten', ''])
      expect(() => parsePositiveInt(bad, '--timeout')).toThrow(UsageError);
  });

  it('parses positive fractions', () => {
    expect(parsePositiveNumber('0.5', '--cpu')).toBe(0.5);
    for (const bad of ['0', '-2', 'x', ' ']) expect(() => parsePositiveNumber(bad, '--cpu')).toThrow(UsageError);
  });
});

describe('parseDurationMs', () => {
  it('reads units and bare milliseconds', () => {
    expect(parseDurationMs('1h', '--ttl')).toBe(3_600_000);
    expect(parseDurationMs('30m', '--ttl')).toBe(1_800_000);
    expect(parseDurationMs('45s', '--ttl')).toBe(45_000);
    expect(parseDurationMs('7d', '--ttl')).toBe(604_800_000);
    expect(parseDurationMs('1.5h', '--ttl')).toBe(5_400_000);
    expect(parseDurationMs('2500', '--ttl')).toBe(2500);
  });
  it('refuses anything else', () => {
    for (const bad of ['', '0', '1w', 'h', '-1h', '1 hour']) {
      expect(() => parseDurationMs(bad, '--ttl'), bad).toThrow(UsageError);
    }
  });
});
