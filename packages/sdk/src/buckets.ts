import type { AddBucketRequest, Bucket, SyncRequest, SyncResult } from '@burrow/contract';
import { BucketListParser, BucketParser, SyncResultParser } from './contract-wire.js';
import type { HttpClient } from './http-client.js';

/**
 * The tenant's named S3 bucket credentials (`client.buckets`): held by the server, encrypted at rest, never
 * returned; sandboxes sync with them by name (docs/s3.md).
 */
export class Buckets {
  readonly #http: HttpClient;

  /** @internal Use `client.buckets`. */
  constructor(http: HttpClient) {
    this.#http = http;
  }

  /**
   * Keep credentials under `request.name` after checking them against the bucket (`POST /v1/buckets`).
   * @param request `name`, `endpoint`, `accessKeyId`, `secretAccessKey`; `bucket` (default: `name`), `region`
   *   (default `us-east-1`), `pathStyle` (default false; MinIO and Swift need true)
   * @returns the bucket as listed (without the secret)
   * @throws `BurrowError` with code `bucket_denied` (wrong key or secret), `bucket_missing`, `bucket_unavailable`
   *   (endpoint down) or `bucket_exists`; nothing is kept then
   * @example
   * ```ts
   * await client.buckets.add({ name: 'art', endpoint: 'http://127.0.0.1:18480', accessKeyId: 'k', secretAccessKey: 's', pathStyle: true });
   * ```
   */
  async add(request: AddBucketRequest): Promise<Bucket> {
    return this.#http.json(BucketParser, 'POST', '/buckets', { json: request });
  }

  /**
   * The tenant's buckets, by name (no secrets).
   * @example
   * ```ts
   * const names = (await client.buckets.list()).map((b) => b.name);
   * ```
   */
  async list(): Promise<Bucket[]> {
    return (await this.#http.json(BucketListParser, 'GET', '/buckets')).items;
  }

  /**
   * Remove named credentials.
   * @throws `BurrowError` with code `bucket_not_found`
   * @example
   * ```ts
   * await client.buckets.remove('art');
   * ```
   */
  async remove(name: string): Promise<void> {
    await this.#http.empty('DELETE', `/buckets/${encodeURIComponent(name)}`);
  }
}

/**
 * Sync a directory of sandbox `sandboxId` with a prefix of a named bucket (`POST /v1/sandboxes/{id}/sync`).
 * @internal Use `sandbox.sync(...)`.
 */
export function syncSandbox(http: HttpClient, sandboxId: string, request: SyncRequest): Promise<SyncResult> {
  return http.json(SyncResultParser, 'POST', `/sandboxes/${encodeURIComponent(sandboxId)}/sync`, { json: request });
}
