import { createHash } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { SyncRequestSchema, SyncResult } from '@burrow/contract';
import type { Logger } from 'pino';
import type { z } from 'zod';
import type { Clock } from '../util/clock.js';
import { type BucketService, clientOf } from './bucket-service.js';
import { runSync } from './bucket-sync.js';
import type { FileService } from './file-service.js';
import type { Principal } from './key-service.js';

/**
 * Artifacts: a sandbox directory synced with a prefix of one of the tenant's named buckets. The server holds the
 * credentials and moves the bytes between the sandbox's file view and S3; nothing of the credentials enters the
 * sandbox. The state of each (sandbox, path, bucket, prefix) lives in `<stateDir>/<sandboxId>/<hash>.json`.
 */
export class SyncService {
  constructor(
    private readonly deps: {
      buckets: BucketService;
      files: FileService;
      /** `<dataDir>/sync-state`. */
      stateDir: string;
      clock: Clock;
      logger: Logger;
    },
  ) {}

  /**
   * Sync `input.path` of running sandbox `id` with `s3://<bucket>/<prefix>`. A pause, stop or delete during the
   * sync ends it (`conflict`); files already moved stay moved, the state file is not advanced.
   * @throws ApiError `bucket_not_found`, `bucket_denied`, `bucket_missing`, `bucket_unavailable`,
   *   `bucket_checksum_mismatch`, `sandbox_not_found`, `sandbox_not_running`, `invalid_path` and the other file codes
   */
  async sync(caller: Principal, id: string, input: z.output<typeof SyncRequestSchema>): Promise<SyncResult> {
    const record = await this.deps.buckets.require(caller.tenantId, input.bucket);
    const prefix = input.prefix.replace(/\/+$/, '');
    const controller = new AbortController();
    let finished = (): void => undefined;
    const done = new Promise<void>((resolve) => {
      finished = resolve;
    });
    const client = clientOf(record);
    try {
      return await this.deps.files.with(caller, id, async (fs) => {
        const unhold = this.deps.files.hold(id, async () => {
          controller.abort();
          await done;
        });
        try {
          const result = await runSync({
            fs,
            client,
            bucket: record.bucket,
            prefix,
            path: input.path.length > 1 ? input.path.replace(/\/+$/, '') : input.path,
            direction: input.direction,
            delete: input.delete,
            stateFile: this.stateFile(id, input.path, record.id, prefix),
            signal: controller.signal,
            nowMs: this.deps.clock.nowMs(),
          });
          this.deps.logger.info(
            {
              sandboxId: id,
              bucket: record.name,
              up: result.uploaded.length,
              down: result.downloaded.length,
              conflicts: result.conflicts.length,
            },
            'sync done',
          );
          return result;
        } finally {
          unhold();
          finished();
        }
      });
    } finally {
      client.destroy();
    }
  }

  /** Forget the sync state of a deleted sandbox. */
  async forget(id: string): Promise<void> {
    await rm(join(this.deps.stateDir, id), { recursive: true, force: true });
  }

  private stateFile(id: string, path: string, bucketId: string, prefix: string): string {
    const key = createHash('sha256')
      .update(JSON.stringify([path, bucketId, prefix]))
      .digest('hex')
      .slice(0, 32);
    return join(this.deps.stateDir, id, `${key}.json`);
  }
}
