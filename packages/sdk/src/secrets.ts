import type { Secret, SetSecretRequest } from '@burrow/contract';
import { SecretListParser, SecretParser } from './contract-wire.js';
import type { HttpClient } from './http-client.js';

/**
 * Secrets of the caller's tenant, substituted at egress (`client.secrets`; docs/network.md "Secrets at egress"). A
 * sandbox created with `secrets: ['NAME']` (or `[{ name, env }]`) holds only a placeholder; its requests to the
 * secret's hosts carry the value. Values go in and are never returned.
 *
 * @example
 * ```ts
 * await client.secrets.set('OPENAI', { value: process.env.OPENAI_API_KEY!, hosts: ['api.openai.com'],
 *   header: 'Authorization', format: 'Bearer {value}' });
 * const sandbox = await Sandbox.create({ secrets: [{ name: 'OPENAI', env: 'OPENAI_API_KEY' }] });
 * ```
 */
export class Secrets {
  readonly #http: HttpClient;

  /** @internal Use `client.secrets`. */
  constructor(http: HttpClient) {
    this.#http = http;
  }

  /**
   * Creates the secret or replaces it whole (value, hosts, header, format).
   * @param name letters, digits and `_`, 1–64 characters
   * @param request `value` (at most 64 KiB, no CR/LF/NUL), `hosts` (1–32 domains or `*.domain`), optional `header`
   *   and `format` (`{value}` stands for the secret; default `{value}`)
   * @returns the secret without its value
   * @throws `InvalidRequestError` for a malformed request or a value over 64 KiB (`secret_too_large`)
   * @example
   * ```ts
   * await client.secrets.set('GH_TOKEN', { value: token, hosts: ['api.github.com'] });
   * ```
   */
  async set(name: string, request: SetSecretRequest): Promise<Secret> {
    return this.#http.json(SecretParser, 'PUT', `/secrets/${encodeURIComponent(name)}`, { json: request });
  }

  /**
   * Replaces a secret's value; every sandbox holding it sends the new one from its next request on.
   * @throws `SecretNotFoundError` when no secret has this name
   * @example
   * ```ts
   * await client.secrets.rotate('GH_TOKEN', newToken);
   * ```
   */
  async rotate(name: string, value: string): Promise<Secret> {
    return this.#http.json(SecretParser, 'POST', `/secrets/${encodeURIComponent(name)}/rotate`, { json: { value } });
  }

  /**
   * Lists the tenant's secrets: names, hosts, header, format, dates (never values).
   * @example
   * ```ts
   * for (const secret of await client.secrets.list()) console.log(secret.name, secret.hosts.join(','));
   * ```
   */
  async list(): Promise<Secret[]> {
    return (await this.#http.json(SecretListParser, 'GET', '/secrets')).items;
  }

  /**
   * Deletes a secret; sandboxes holding its placeholder send the placeholder from then on.
   * @throws `SecretNotFoundError` when no secret has this name
   * @example
   * ```ts
   * await client.secrets.delete('GH_TOKEN');
   * ```
   */
  async delete(name: string): Promise<void> {
    await this.#http.empty('DELETE', `/secrets/${encodeURIComponent(name)}`);
  }
}
