import type { ConnectionOptions } from '@burrow/sdk';
import { discoverApiKey } from './api-key-discovery.js';

/** What every command needs from its surroundings; built once in `main.ts`. */
export interface CliContext {
  /** The environment, read only through this object. */
  env: Readonly<Record<string, string | undefined>>;
  /** Where data goes (`--json` output, ids, tables, file contents). */
  stdout: NodeJS.WritableStream;
  /** Where progress and diagnostics go. */
  stderr: NodeJS.WritableStream;
  /** Local stdin, forwarded by `burrow exec` when it is not a terminal. */
  stdin: NodeJS.ReadStream;
  /** Reads a file as UTF-8 (for the admin key file). */
  readFile: (path: string) => string;
}

/** Global options every command inherits. */
export interface GlobalOptions {
  url?: string | undefined;
  apiKey?: string | undefined;
  /** `--as-tenant`: the tenant an admin key acts for. */
  asTenant?: string | undefined;
}

/** SDK connection options from `--url` / `BURROW_URL`, the discovered key and `--as-tenant` / `BURROW_TENANT`. */
export function connectionFor(context: CliContext, options: GlobalOptions): ConnectionOptions {
  const key = discoverApiKey({ flag: options.apiKey, env: context.env, readFile: context.readFile });
  const url = options.url ?? context.env.BURROW_URL;
  return {
    apiUrl: url === undefined || url === '' ? undefined : url,
    apiKey: key?.apiKey,
    tenantId: options.asTenant ?? (context.env.BURROW_TENANT || undefined),
  };
}

/** Writes a value as pretty JSON plus a newline. */
export function printJson(context: CliContext, value: unknown): void {
  context.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** Formats rows as a left-aligned table with a header row, columns separated by two spaces. */
export function formatTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((title, column) =>
    Math.max(title.length, ...rows.map((row) => (row[column] ?? '').length)),
  );
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, column) => (column === cells.length - 1 ? cell : cell.padEnd(widths[column] ?? 0)))
      .join('  ')
      .trimEnd();
  return `${[line(header), ...rows.map(line)].join('\n')}\n`;
}

/**
 * The SDK, loaded by the action that uses it, so that `burrow --version`, `--help` and usage errors start
 * without it.
 */
export function loadSdk(): Promise<typeof import('@burrow/sdk')> {
  return import('@burrow/sdk');
}
