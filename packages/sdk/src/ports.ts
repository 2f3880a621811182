import type { PortList, PortUrl, PortUrlRequest } from '@burrow/contract';
import { PortListParser, PortUrlParser } from './contract-wire.js';
import type { HttpClient } from './http-client.js';

/** Options of {@link Ports.url}. */
export interface PortUrlOptions {
  /**
   * `true` makes the port public (its URL answers anyone), `false` private again.
   * @default the port's current access (private unless made public)
   */
  public?: boolean;
  /** A signed URL that works without the access token until `expiresAt` (it sets a cookie for its host). @default false */
  signed?: boolean;
  /** Life of a signed URL, ms (1 s to 7 days). @default 3_600_000 (1 hour) */
  ttlMs?: number;
}

/**
 * Ports of one sandbox (`sandbox.ports`): preview URLs `http://<port>-<sandbox label>.<previewDomain>:<serverPort>/`
 * that reach a TCP port inside, and the ports listening there (docs/network.md, "Ingress and preview URLs").
 */
export class Ports {
  readonly #http: HttpClient;
  readonly #sandboxId: string;

  /** @internal */
  constructor(http: HttpClient, sandboxId: string) {
    this.#http = http;
    this.#sandboxId = sandboxId;
  }

  /**
   * A preview URL of `port` (`POST /v1/sandboxes/{id}/ports/{port}/url`). A private port's unsigned URL needs the
   * returned `accessToken` in the `X-Burrow-Access-Token` header; a signed URL needs nothing until it expires. A
   * request to the URL of a paused sandbox resumes it (unless it was created with `autoResume: false`).
   * @param port TCP port inside the sandbox, 1-65535
   * @returns `{ port, url, public, expiresAt, accessToken }`
   * @throws `InvalidRequestError` for a port outside 1-65535 or `ttlMs` without `signed`; `SandboxNotFoundError`
   * @example
   * ```ts
   * const { url } = await sandbox.ports.url(8000, { signed: true, ttlMs: 3_600_000 });
   * ```
   */
  async url(port: number, options: PortUrlOptions = {}): Promise<PortUrl> {
    const request: PortUrlRequest = { ...options };
    return this.#http.json(
      PortUrlParser,
      'POST',
      `/sandboxes/${encodeURIComponent(this.#sandboxId)}/ports/${encodeURIComponent(String(port))}/url`,
      { json: request },
    );
  }

  /**
   * The TCP ports listening inside the sandbox, each with its address, access and preview URL
   * (`GET /v1/sandboxes/{id}/ports`). A paused sandbox resumes first unless it was created with `autoResume: false`.
   * @throws `SandboxNotFoundError`, `SandboxNotRunningError`, `SandboxPausedError`
   * @example
   * ```ts
   * for (const p of (await sandbox.ports.list()).ports) console.log(p.port, p.url);
   * ```
   */
  async list(): Promise<PortList> {
    return this.#http.json(PortListParser, 'GET', `/sandboxes/${encodeURIComponent(this.#sandboxId)}/ports`);
  }
}
