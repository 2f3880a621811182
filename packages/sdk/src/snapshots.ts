import type { Snapshot } from '@burrow/contract';
import type { ConnectionOptions } from './connection-config.js';
import { SnapshotListParser, SnapshotParser } from './contract-wire.js';
import { HttpClient } from './http-client.js';

/** Options of {@link Snapshots.create}. */
export interface CreateSnapshotOptions {
  /** Name, unique per tenant. A named snapshot outlives its sandbox; an unnamed one is deleted with it. */
  name?: string | undefined;
  /** Include processes and memory; false keeps the files only. @default true */
  memory?: boolean | undefined;
}

/**
 * Snapshots of one sandbox (`sandbox.snapshots`), or of the whole tenant ({@link Snapshots.connect}). Get and
 * delete take a name or `snp_` id of any of the tenant's snapshots.
 */
export class Snapshots {
  readonly #http: HttpClient;
  readonly #sandboxId: string | null;

  /** @internal */
  constructor(http: HttpClient, sandboxId: string | null) {
    this.#http = http;
    this.#sandboxId = sandboxId;
  }

  /**
   * Snapshots of every sandbox of the key's tenant (list, get, delete; `create` needs a sandbox).
   * @example
   * ```ts
   * const all = await Snapshots.connect().list();
   * ```
   */
  static connect(options: ConnectionOptions = {}): Snapshots {
    return new Snapshots(new HttpClient(options), null);
  }

  /**
   * Takes a checksummed snapshot of the sandbox (running: held still only for the checkpoint; paused; or, files
   * only, stopped).
   * @returns the snapshot record.
   * @throws `ConflictError` when the name is taken; `SandboxNotRunningError`; `ServerError` when the runtime fails.
   * @example
   * ```ts
   * const snap = await sandbox.snapshots.create({ name: 'after-install' });
   * const copy = await Sandbox.create({ fromSnapshot: 'after-install' });
   * ```
   */
  async create(options: CreateSnapshotOptions = {}): Promise<Snapshot> {
    if (this.#sandboxId === null) throw new TypeError('create a snapshot through sandbox.snapshots');
    return this.#http.json(SnapshotParser, 'POST', `/sandboxes/${encodeURIComponent(this.#sandboxId)}/snapshots`, {
      json: { ...(options.name === undefined ? {} : { name: options.name }), memory: options.memory ?? true },
    });
  }

  /**
   * Lists this sandbox's snapshots (or, from {@link Snapshots.connect}, every one), oldest first.
   * @example
   * ```ts
   * const { items } = await sandbox.snapshots.list();
   * ```
   */
  async list(): Promise<Snapshot[]> {
    const page = await this.#http.json(SnapshotListParser, 'GET', '/snapshots', {
      query: { sandboxId: this.#sandboxId ?? undefined },
    });
    return page.items;
  }

  /**
   * Gets a snapshot by name or id.
   * @throws `SnapshotNotFoundError`.
   * @example
   * ```ts
   * const snap = await sandbox.snapshots.get('after-install');
   * ```
   */
  async get(ref: string): Promise<Snapshot> {
    return this.#http.json(SnapshotParser, 'GET', `/snapshots/${encodeURIComponent(ref)}`);
  }

  /**
   * Deletes a snapshot and its bytes.
   * @throws `SnapshotNotFoundError`.
   * @example
   * ```ts
   * await sandbox.snapshots.delete('after-install');
   * ```
   */
  async delete(ref: string): Promise<void> {
    await this.#http.empty('DELETE', `/snapshots/${encodeURIComponent(ref)}`);
  }
}
