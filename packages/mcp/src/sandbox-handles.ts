import { type ConnectionOptions, Sandbox } from '@burrow/sdk';

/**
 * SDK handles on sandboxes, kept per connection (URL, key, tenant) and id, so that a tool on a sandbox costs the API
 * call it makes and nothing more: `Sandbox.get` reads the whole record (network counters included), which costs
 * several times an exec round trip. A handle holds only the id and the connection; every call through it is
 * authenticated and checked by the API anew, so a handle outliving a key's revocation or its sandbox's deletion only
 * ever reaches the API's refusal.
 */
export class SandboxHandles {
  readonly #handles = new Map<string, Sandbox>();
  readonly #maxEntries: number;

  /** @param maxEntries - handles kept; the least recently used goes first. @default 1_024 */
  constructor(maxEntries = 1_024) {
    this.#maxEntries = maxEntries;
  }

  /**
   * The handle on sandbox `id` for `connection`, fetched (`Sandbox.get`) on first use.
   * @throws as `Sandbox.get` (`SandboxNotFoundError`, `AuthenticationError`, `ConnectionError`, …)
   */
  async get(id: string, connection: ConnectionOptions): Promise<Sandbox> {
    const key = handleKey(id, connection);
    const held = this.#handles.get(key);
    if (held !== undefined) {
      this.#handles.delete(key);
      this.#handles.set(key, held);
      return held;
    }
    const sandbox = await Sandbox.get(id, connection);
    this.remember(sandbox, connection);
    return sandbox;
  }

  /** Keeps a handle the caller already holds (a created or forked sandbox). */
  remember(sandbox: Sandbox, connection: ConnectionOptions): void {
    this.#handles.set(handleKey(sandbox.id, connection), sandbox);
    for (const oldest of this.#handles.keys()) {
      if (this.#handles.size <= this.#maxEntries) break;
      this.#handles.delete(oldest);
    }
  }

  /** Drops the handle on sandbox `id` (after its deletion). */
  forget(id: string, connection: ConnectionOptions): void {
    this.#handles.delete(handleKey(id, connection));
  }

  /** Handles held. */
  get size(): number {
    return this.#handles.size;
  }
}

function handleKey(id: string, connection: ConnectionOptions): string {
  return JSON.stringify([connection.apiUrl ?? '', connection.apiKey ?? '', connection.tenantId ?? '', id]);
}
