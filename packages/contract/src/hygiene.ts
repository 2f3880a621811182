import { z } from 'zod';
import { InstantSchema, SandboxIdSchema } from './common.js';

/** Why and since when a sandbox is set aside; null on a sandbox that is not quarantined. */
export const QuarantineSchema = z
  .object({
    /** When it was quarantined (ISO-8601). */
    at: InstantSchema,
    /** The caller's reason, shown in info. */
    reason: z.string(),
    /** Id of the API key that quarantined it. */
    by: z.string(),
  })
  .meta({ id: 'Quarantine' });
export type Quarantine = z.infer<typeof QuarantineSchema>;

/** Body of `POST /v1/sandboxes/{id}/quarantine`. */
export const QuarantineSandboxRequestSchema = z
  .object({
    /** Why (1–500 characters, shown in info). @default 'quarantined for inspection' */
    reason: z
      .string()
      .min(1)
      .max(500)
      .refine((v) => !v.includes('\0'), 'the reason may not contain NUL bytes')
      .default('quarantined for inspection'),
  })
  .strict()
  .meta({ id: 'QuarantineSandboxRequest' });
export type QuarantineSandboxRequest = z.input<typeof QuarantineSandboxRequestSchema>;

/**
 * Body of `POST /v1/sandboxes/{id}/reset`: back to a fresh disk and a fresh boot of its template, or to a named
 * snapshot (with its processes and memory unless `memory: false`). The id, hostname, labels and policies stay.
 */
export const ResetSandboxRequestSchema = z
  .discriminatedUnion('to', [
    z.object({ to: z.literal('template') }).strict(),
    z
      .object({
        to: z.literal('snapshot'),
        /** Snapshot name or `snp_` id of the caller's tenant. */
        snapshot: z.string().min(1).max(64),
        /** Restore processes and memory (the snapshot must hold them); false boots fresh on its files. @default true */
        memory: z.boolean().default(true),
      })
      .strict(),
  ])
  .meta({ id: 'ResetSandboxRequest' });
export type ResetSandboxRequest = z.input<typeof ResetSandboxRequestSchema>;

/** Query of `GET /v1/sandboxes/{id}/inspect`. */
export const InspectSandboxQuerySchema = z.object({
  /** Most changed paths listed (1–10000); the rest are counted and `truncated` is set. @default 1000 */
  limit: z.coerce.number().int().min(1).max(10_000).default(1000),
  /** Deepest directory level in `directories` (1 = `/root`, 2 = `/root/src`, up to 4). @default 2 */
  depth: z.coerce.number().int().min(1).max(4).default(2),
});

/** One path a sandbox changed relative to its template. */
export const DiskChangeSchema = z
  .object({
    path: z.string(),
    /** `added`: not in the template; `modified`: replaces a template entry; `deleted`: a template entry removed. */
    kind: z.enum(['added', 'modified', 'deleted']),
    type: z.enum(['file', 'directory', 'symlink', 'other']),
    /** Bytes allocated on the sandbox's disk; 0 for deletions. */
    sizeBytes: z.number().int(),
  })
  .meta({ id: 'DiskChange' });

/** Response of `GET /v1/sandboxes/{id}/inspect`: retained state, read without changing the sandbox. */
export const SandboxInspectionSchema = z
  .object({
    sandboxId: SandboxIdSchema,
    /** The sandbox's state during the look (running, paused or stopped; a paused disk is read read-only). */
    state: z.string(),
    disk: z.object({
      /** Bytes the sandbox's own writable layer occupies (what it wrote; the template is shared). */
      usedBytes: z.number().int(),
      /** Its disk limit in bytes. */
      limitBytes: z.number().int(),
      /** Directories of the writable layer by bytes (whole subtree), largest first, at most 50. */
      directories: z.array(z.object({ path: z.string(), bytes: z.number().int() })),
    }),
    changes: z.object({
      /** Changes since the template in path order, at most `limit`. */
      items: z.array(DiskChangeSchema),
      counts: z.object({ added: z.number().int(), modified: z.number().int(), deleted: z.number().int() }),
      /** True when `items` was cut at `limit`. */
      truncated: z.boolean(),
    }),
    inspectedAt: InstantSchema,
  })
  .meta({ id: 'SandboxInspection' });
export type SandboxInspection = z.infer<typeof SandboxInspectionSchema>;
