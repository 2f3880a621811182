import { join } from 'node:path';

/** Data directory used when `BURROW_DATA_DIR` is unset. */
export const DEFAULT_DATA_DIR = '/var/lib/burrow';

/** Where {@link discoverApiKey} looks. */
export interface ApiKeySources {
  /** `--api-key`. */
  flag: string | undefined;
  /** The environment (`BURROW_API_KEY`, `BURROW_DATA_DIR`). */
  env: Readonly<Record<string, string | undefined>>;
  /** Reads a file as UTF-8, or throws when it cannot. */
  readFile: (path: string) => string;
}

/**
 * Finds the API key: `--api-key`, else `BURROW_API_KEY`, else the admin key file `<BURROW_DATA_DIR>/admin-key`
 * (default `/var/lib/burrow/admin-key`) when it is readable.
 * @returns the key and where it came from, or undefined when there is none.
 */
export function discoverApiKey(sources: ApiKeySources): { apiKey: string; source: string } | undefined {
  if (sources.flag !== undefined && sources.flag !== '') return { apiKey: sources.flag, source: '--api-key' };
  const fromEnv = sources.env.BURROW_API_KEY;
  if (fromEnv !== undefined && fromEnv !== '') return { apiKey: fromEnv, source: 'BURROW_API_KEY' };
  const dataDir = sources.env.BURROW_DATA_DIR;
  const path = join(dataDir === undefined || dataDir === '' ? DEFAULT_DATA_DIR : dataDir, 'admin-key');
  try {
    const key = sources.readFile(path).trim();
    return key === '' ? undefined : { apiKey: key, source: path };
  } catch {
    return undefined;
  }
}
