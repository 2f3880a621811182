import { z } from 'zod';
import { InstantSchema, NameSchema, SandboxIdSchema } from './common.js';
import { ExpirySchema } from './lifecycle.js';

/** `snp_` + 20 base32 characters. */
export const SnapshotIdSchema = z
  .string()
  .regex(/^snp_[0-9a-hjkmnp-tv-z]{20}$/, 'must look like snp_ followed by 20 base32 characters');

/** Body of `POST /v1/sandboxes/{id}/snapshots`. */
export const CreateSnapshotRequestSchema = z
  .object({
    /** Name, unique per tenant. A named snapshot outlives its sandbox; an unnamed one is deleted with it. */
    name: NameSchema.optional(),
    /** Include processes and memory (needs the runtime's `checkpoint` capability); false keeps the files only. @default true */
    memory: z.boolean().default(true),
    /** Delete the snapshot this long after it is taken, ms (1 s to 365 days). @default none */
    retentionMs: z.number().int().min(1000).max(31_536_000_000).optional(),
  })
  .strict()
  .meta({ id: 'CreateSnapshotRequest' });
export type CreateSnapshotRequest = z.input<typeof CreateSnapshotRequestSchema>;

/**
 * Where a snapshot's copy in the server's S3 store stands: `pending` (queued or uploading), `failed` (the last
 * attempt failed; a retry with backoff is scheduled; `error` says why) or `done`. A restore works in every state on
 * the machine that took the snapshot; elsewhere only once `done`.
 */
export const SnapshotUploadSchema = z
  .object({
    state: z.enum(['pending', 'done', 'failed']),
    /** Bytes still to send (0 once done, and before the chunks are counted). */
    bytesLeft: z.number().int().nonnegative(),
    /** The last attempt's failure, with its stable error code, or null. */
    error: z.object({ code: z.string(), message: z.string() }).nullable(),
  })
  .meta({ id: 'SnapshotUpload' });
export type SnapshotUpload = z.infer<typeof SnapshotUploadSchema>;

/** An immutable, checksummed record of a sandbox's files and optionally its processes and memory. */
export const SnapshotSchema = z
  .object({
    id: SnapshotIdSchema,
    name: NameSchema.nullable(),
    /** The sandbox it was taken from (it may no longer exist). */
    sandboxId: SandboxIdSchema,
    template: NameSchema,
    templateId: z.string(),
    /** Whether it holds processes and memory, or files only. */
    memory: z.boolean(),
    /** Bytes of the process and memory image. */
    imageSizeBytes: z.number().int(),
    /** Bytes the disk copy occupies on the host. */
    diskSizeBytes: z.number().int(),
    /** Runtime build the image needs, for example `runsc version 0.0~20240729.0 systrap`. */
    runtimeVersion: z.string(),
    createdAt: InstantSchema,
    /**
     * When retention deletes it (ISO-8601), or null. Keep-last-N of its sandbox can delete it earlier: such a
     * deletion is announced by a `warning` event at least `BURROW_EXPIRY_WARNING_MS` ahead, and from then on this
     * shows when it will be carried out.
     */
    expiresAt: InstantSchema.nullable(),
    /** The deadline as `{ at, action: 'delete', reason: 'snapshot-retention' }`, or null. */
    expiry: ExpirySchema.nullable(),
    /** Its upload to the server's S3 snapshot store (`BURROW_SNAPSHOT_STORE=s3://…`), or null with a local store. */
    upload: SnapshotUploadSchema.nullable(),
  })
  .meta({ id: 'Snapshot' });
export type Snapshot = z.infer<typeof SnapshotSchema>;

/** Response of `GET /v1/snapshots`. */
export const SnapshotListSchema = z.object({ items: z.array(SnapshotSchema) }).meta({ id: 'SnapshotList' });
export type SnapshotList = z.infer<typeof SnapshotListSchema>;

/** Query of `GET /v1/snapshots`. */
export const ListSnapshotsQuerySchema = z.object({ sandboxId: SandboxIdSchema.optional() });

/** Path parameters naming one snapshot by name or id. */
export const SnapshotParamsSchema = z.object({ ref: z.string().min(1).max(64) });
