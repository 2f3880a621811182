/** Where the SDK connects when neither `apiUrl` nor `BURROW_URL` says otherwise. */
export const DEFAULT_API_URL = 'http://127.0.0.1:7420';

/**
 * How to reach a Burrow server. Every SDK entry point takes these fields.
 *
 * @example
 * ```ts
 * const sandbox = await Sandbox.create({ apiUrl: 'http://10.0.0.5:7420', apiKey: process.env.MY_KEY });
 * ```
 */
export interface ConnectionOptions {
  /** Base URL of the server, without `/v1`. @default the `BURROW_URL` environment variable, else `http://127.0.0.1:7420` */
  apiUrl?: string | undefined;
  /** API key secret sent as `Authorization: Bearer <apiKey>`. @default the `BURROW_API_KEY` environment variable */
  apiKey?: string | undefined;
  /**
   * Tenant to act for, sent as `X-Burrow-Tenant`: an admin key may name any tenant, a member key only its own
   * (`forbidden` otherwise). @default the `BURROW_TENANT` environment variable, else the key's own tenant
   */
  tenantId?: string | undefined;
  /** The `fetch` to use (for tests or proxies). @default the global `fetch` */
  fetch?: typeof globalThis.fetch | undefined;
}

/** Connection options with the defaults filled in. */
export interface ResolvedConnection {
  /** Base URL without a trailing slash. */
  apiUrl: string;
  /** API key, or undefined to send no `Authorization` header. */
  apiKey: string | undefined;
  /** Tenant to act for, or undefined for the key's own. */
  tenantId: string | undefined;
  fetch: typeof globalThis.fetch;
}

/**
 * Fills in connection defaults: `apiUrl` from `BURROW_URL` (else {@link DEFAULT_API_URL}) and `apiKey` from
 * `BURROW_API_KEY`, `tenantId` from `BURROW_TENANT`. The SDK reads these environment variables here and nowhere else.
 */
export function resolveConnection(
  options: ConnectionOptions = {},
  env: Readonly<Record<string, string | undefined>> = process.env,
): ResolvedConnection {
  const apiUrl = (options.apiUrl ?? nonEmpty(env.BURROW_URL) ?? DEFAULT_API_URL).replace(/\/+$/, '');
  return {
    apiUrl,
    apiKey: options.apiKey ?? nonEmpty(env.BURROW_API_KEY),
    tenantId: options.tenantId ?? nonEmpty(env.BURROW_TENANT),
    fetch: options.fetch ?? globalThis.fetch,
  };
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}

/** Splits connection fields off an options object that also carries request fields. */
export function splitConnection<T extends ConnectionOptions>(
  options: T,
): { connection: ConnectionOptions; rest: Omit<T, keyof ConnectionOptions> } {
  const { apiUrl, apiKey, tenantId, fetch, ...rest } = options;
  return { connection: { apiUrl, apiKey, tenantId, fetch }, rest };
}
