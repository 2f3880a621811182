import { describe, expect, it } from 'vitest';
import { UsageError } from './exit-codes.js';
import { collect, keyValueRecord, parseKeyValue, parsePositiveInt, parsePositiveNumber } from './key-value-parse.js';

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
