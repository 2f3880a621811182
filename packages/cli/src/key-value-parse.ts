import { UsageError } from './exit-codes.js';

/**
 * Parses `KEY=VALUE` (the value may contain `=` and may be empty).
 * @throws {@link UsageError} when there is no `=` or the key is empty.
 */
export function parseKeyValue(text: string, what = 'value'): [key: string, value: string] {
  const equals = text.indexOf('=');
  if (equals <= 0) throw new UsageError(`${what} "${text}" is not KEY=VALUE`, `write it as --${what} KEY=VALUE`);
  return [text.slice(0, equals), text.slice(equals + 1)];
}

/** Builds a record from repeated `KEY=VALUE` options; a later key wins. */
export function keyValueRecord(items: readonly string[] | undefined, what: string): Record<string, string> {
  const record: Record<string, string> = {};
  for (const item of items ?? []) {
    const [key, value] = parseKeyValue(item, what);
    record[key] = value;
  }
  return record;
}

/** Commander collector for repeatable options: `--env A=1 --env B=2` → `['A=1', 'B=2']`. */
export function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

/**
 * Parses a positive integer option (`--timeout 5000`).
 * @throws {@link UsageError} for anything else.
 */
export function parsePositiveInt(text: string, what: string): number {
  if (!/^\d+$/.test(text) || Number(text) <= 0)
    throw new UsageError(`${what} must be a positive integer, got "${text}"`);
  return Number(text);
}

/**
 * Parses a positive number option that may have a fraction (`--cpu 0.5`).
 * @throws {@link UsageError} for anything else.
 */
export function parsePositiveNumber(text: string, what: string): number {
  const value = Number(text);
  if (text.trim() === '' || !Number.isFinite(value) || value <= 0) {
    throw new UsageError(`${what} must be a positive number, got "${text}"`);
  }
  return value;
}
