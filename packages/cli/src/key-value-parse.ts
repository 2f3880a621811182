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

const DURATION_UNITS_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * Parses a duration: a number with a unit (`500ms`, `45s`, `30m`, `1h`, `7d`), or a bare integer of milliseconds.
 * @returns milliseconds
 * @throws {@link UsageError} for anything else, or zero.
 */
export function parseDurationMs(text: string, what: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(text.trim());
  const ms = match === null ? Number.NaN : Number(match[1]) * (DURATION_UNITS_MS[match[2] ?? 'ms'] ?? Number.NaN);
  if (!Number.isFinite(ms) || ms <= 0) {
    throw new UsageError(`${what} must be a duration such as 30m, 1h or 7d, got "${text}"`);
  }
  return Math.round(ms);
}
