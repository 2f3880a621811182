import type { CopyVolumeRequest, Volume as VolumeInfo, VolumeList } from '@burrow/contract';
import { type ConnectionOptions, splitConnection } from './connection-config.js';
import { VolumeListParser, VolumeParser } from './contract-wire.js';
import { Files } from './files.js';
import { HttpClient } from './http-client.js';

/** The file calls a volume answers without a sandbox (paths are absolute within the volume: `/a.txt`). */
export type VolumeFiles = Pick<
  Files,
  'write' | 'read' | 'readText' | 'readStream' | 'list' | 'stat' | 'remove' | 'upload' | 'download'
>;

/** Options of {@link Volume.create}. */
export interface CreateVolumeOptions extends ConnectionOptions {
  /** Name, unique per tenant (1-63 lowercase letters, digits, dashes). */
  name: string;
  /** Size in MiB (16 to 1 048 576): a write past it fails with ENOSPC. */
  sizeMiB: number;
  labels?: Record<string, string> | undefined;
  /** Several sandboxes may mount it read-write at once. @default false */
  shared?: boolean | undefined;
}

/** Options of {@link Volume.list}. */
export interface ListVolumesOptions extends ConnectionOptions {
  kind?: 'volume' | 'snapshot' | undefined;
  /** Only snapshots and forks of this volume id. */
  sourceId?: string | undefined;
  /** Label filters `key=value`, all of which must match. */
  labels?: string[] | undefined;
  /** Page size (1-200). @default 50 */
  limit?: number | undefined;
  /** `nextCursor` of the previous page. */
  cursor?: string | undefined;
}

/**
 * A volume: named storage of a fixed size that outlives sandboxes (docs/volumes.md). Mount it with
 * `Sandbox.create({ volumes: [{ name, path, readOnly? }] })`; read and write it without a sandbox through `files`.
 * @example
 * ```ts
 * const volume = await Volume.create({ name: 'cache', sizeMiB: 1024 });
 * await volume.files.write('/hello.txt', 'hi');
 * const sandbox = await Sandbox.create({ volumes: [{ name: 'cache', path: '/cache' }] });
 * ```
 */
export class Volume {
  readonly #http: HttpClient;
  #info: VolumeInfo;
  /** Files of the volume without a sandbox (a volume snapshot's are read-only: writes throw `forbidden`). */
  readonly files: VolumeFiles;

  /** @internal Use {@link Volume.create} or {@link Volume.get}. */
  constructor(http: HttpClient, info: VolumeInfo) {
    this.#http = http;
    this.#info = info;
    this.files = new Files(http, '', `/volumes/${encodeURIComponent(info.id)}/files`);
  }

  /** `vol_` id. */
  get id(): string {
    return this.#info.id;
  }

  /** The record as last fetched (size, bytes used, mounts, lineage). {@link Volume.refresh} updates it. */
  get info(): VolumeInfo {
    return this.#info;
  }

  /**
   * Creates a volume.
   * @throws `ConflictError` (`volume_exists`) when the name is taken; `QuotaExceededError`; `InvalidRequestError`.
   */
  static async create(options: CreateVolumeOptions): Promise<Volume> {
    const { connection, rest } = splitConnection(options);
    const http = new HttpClient(connection);
    return new Volume(http, await http.json(VolumeParser, 'POST', '/volumes', { json: rest }));
  }

  /** A volume or volume snapshot by name or id. @throws `VolumeNotFoundError` */
  static async get(ref: string, options: ConnectionOptions = {}): Promise<Volume> {
    const http = new HttpClient(options);
    return new Volume(http, await http.json(VolumeParser, 'GET', `/volumes/${encodeURIComponent(ref)}`));
  }

  /** One page of the tenant's volumes, oldest first. */
  static async list(options: ListVolumesOptions = {}): Promise<VolumeList> {
    const { connection, rest } = splitConnection(options);
    return new HttpClient(connection).json(VolumeListParser, 'GET', '/volumes', {
      query: {
        kind: rest.kind,
        sourceId: rest.sourceId,
        label: rest.labels,
        limit: rest.limit,
        cursor: rest.cursor,
      },
    });
  }

  /** Fetch the record again. */
  async refresh(): Promise<VolumeInfo> {
    this.#info = await this.#http.json(VolumeParser, 'GET', `/volumes/${encodeURIComponent(this.id)}`);
    return this.#info;
  }

  /** Grow to `sizeMiB`. @throws `InvalidRequestError` (`volume_shrink_refused`) below the current size */
  async resize(sizeMiB: number): Promise<VolumeInfo> {
    this.#info = await this.#http.json(VolumeParser, 'POST', `/volumes/${encodeURIComponent(this.id)}/resize`, {
      json: { sizeMiB },
    });
    return this.#info;
  }

  /**
   * A read-only point-in-time copy, mountable read-only (`retentionMs`: deleted that long after).
   * @throws `ConflictError` when the name is taken
   */
  async snapshot(name: string, options: Omit<CopyVolumeRequest, 'name'> = {}): Promise<Volume> {
    const info = await this.#http.json(VolumeParser, 'POST', `/volumes/${encodeURIComponent(this.id)}/snapshots`, {
      json: { name, ...options },
    });
    return new Volume(this.#http, info);
  }

  /** A writable copy that diverges independently. @throws `ConflictError` when the name is taken */
  async fork(name: string, options: { labels?: Record<string, string> } = {}): Promise<Volume> {
    const info = await this.#http.json(VolumeParser, 'POST', `/volumes/${encodeURIComponent(this.id)}/fork`, {
      json: { name, ...options },
    });
    return new Volume(this.#http, info);
  }

  /**
   * Delete the volume and its bytes. `force` detaches it from stopped and paused sandboxes.
   * @throws `ConflictError` (`volume_in_use`) while a sandbox mounts it
   */
  async delete(options: { force?: boolean } = {}): Promise<void> {
    await this.#http.empty('DELETE', `/volumes/${encodeURIComponent(this.id)}`, {
      query: { force: options.force === true ? 'true' : undefined },
    });
  }
}
