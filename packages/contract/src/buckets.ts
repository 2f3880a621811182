import { z } from 'zod';
import { InstantSchema, NameSchema, SandboxPathSchema } from './common.js';

/** A bucket name as S3 spells it: 3-63 lowercase letters, digits, dots and dashes. */
export const S3BucketNameSchema = z
  .string()
  .regex(/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/, 'an S3 bucket name: 3-63 lowercase letters, digits, dots or dashes');

/** A key prefix inside a bucket: no leading slash, no `.` or `..` segments, at most 512 bytes; '' for the root. */
export const S3PrefixSchema = z
  .string()
  .max(512)
  .refine((p) => !p.startsWith('/'), 'a prefix does not start with /')
  .refine((p) => !p.includes('\0'), 'a prefix may not contain NUL bytes')
  .refine((p) => !p.split('/').some((s) => s === '.' || s === '..'), 'a prefix may not hold . or .. segments');

/** Body of `POST /v1/buckets`: named credentials for one bucket, held by the server for the caller's tenant. */
export const AddBucketRequestSchema = z
  .object({
    /** The name sandboxes refer to (`s3://NAME/prefix`). */
    name: NameSchema,
    /** The bucket's name at the S3 service. @default `name` */
    bucket: S3BucketNameSchema.optional(),
    /** The S3 service's URL, for example `https://s3.eu-west-1.amazonaws.com` or `http://127.0.0.1:18480`. */
    endpoint: z.url({ protocol: /^https?$/ }),
    /** Region the requests are signed for. @default 'us-east-1' */
    region: z
      .string()
      .regex(/^[a-z0-9-]{1,32}$/)
      .default('us-east-1'),
    accessKeyId: z.string().min(1).max(256),
    /** Stored encrypted; never returned, never logged. */
    secretAccessKey: z.string().min(1).max(1024),
    /** Path-style addressing (`endpoint/bucket/key`), which MinIO and Swift need. @default false */
    pathStyle: z.boolean().default(false),
  })
  .strict()
  .meta({ id: 'AddBucketRequest' });
export type AddBucketRequest = z.input<typeof AddBucketRequestSchema>;

/** Named bucket credentials as the API shows them: never the secret. */
export const BucketSchema = z
  .object({
    name: NameSchema,
    bucket: S3BucketNameSchema,
    endpoint: z.string(),
    region: z.string(),
    accessKeyId: z.string(),
    pathStyle: z.boolean(),
    createdAt: InstantSchema,
  })
  .meta({ id: 'Bucket' });
export type Bucket = z.infer<typeof BucketSchema>;

export const BucketListSchema = z.object({ items: z.array(BucketSchema) }).meta({ id: 'BucketList' });
export const BucketParamsSchema = z.object({ name: NameSchema });

/** Where a sync or a fill reads or writes: a named bucket of the tenant and a prefix in it. */
export const BucketRefSchema = z.object({
  /** Name of the tenant's bucket credentials (`burrow buckets add NAME`). */
  bucket: NameSchema,
  /** Key prefix inside the bucket; '' for the bucket's root. @default '' */
  prefix: S3PrefixSchema.default(''),
});

/** Body of `POST /v1/sandboxes/{id}/sync`. */
export const SyncRequestSchema = BucketRefSchema.extend({
  /** Directory inside the sandbox (created for `down` and `both` when missing). */
  path: SandboxPathSchema,
  /**
   * `up`: sandbox → bucket; `down`: bucket → sandbox; `both`: each side's changes since the last sync go to the
   * other; a file changed on both sides goes newest-wins and the older one is kept on both sides as
   * `NAME.conflict-<UTC time>`.
   */
  direction: z.enum(['up', 'down', 'both']),
  /** Also remove, on the receiving side, files the sending side no longer has. @default false */
  delete: z.boolean().default(false),
})
  .strict()
  .meta({ id: 'SyncRequest' });
export type SyncRequest = z.input<typeof SyncRequestSchema>;

/** What one sync did; paths are relative to the synced directory and prefix. */
export const SyncResultSchema = z
  .object({
    uploaded: z.array(z.string()),
    downloaded: z.array(z.string()),
    deletedRemote: z.array(z.string()),
    deletedLocal: z.array(z.string()),
    /** Files changed on both sides: the loser's new name. */
    conflicts: z.array(z.object({ path: z.string(), keptAs: z.string(), winner: z.enum(['sandbox', 'bucket']) })),
    /** Symlinks and special files, left alone as the files API leaves them. */
    skipped: z.array(z.string()),
    bytesUp: z.number().int(),
    bytesDown: z.number().int(),
  })
  .meta({ id: 'SyncResult' });
export type SyncResult = z.infer<typeof SyncResultSchema>;

/** `fromBucket` of a create: fill `path` from a bucket prefix before the sandbox answers. */
export const FromBucketSchema = BucketRefSchema.extend({ path: SandboxPathSchema }).strict();
