import { z } from 'zod';
import { ID_ALPHABET, ID_RANDOM_LENGTH, InstantSchema, LabelsSchema, NameSchema, SandboxIdSchema } from './common.js';

/** `vol_` + 20 base32 characters: a volume, a volume snapshot or a fork. */
export const VolumeIdSchema = z
  .string()
  .regex(
    new RegExp(`^vol_[${ID_ALPHABET}]{${ID_RANDOM_LENGTH}}$`),
    'must look like vol_ followed by 20 base32 characters',
  );

/** Smallest and largest volume, MiB. */
export const VOLUME_MIN_MIB = 16;
export const VOLUME_MAX_MIB = 1_048_576;

/** Size of a volume's filesystem in MiB (16 MiB to 1 TiB); its files may fill a little less (ext4's own metadata). */
export const VolumeSizeMiBSchema = z.number().int().min(VOLUME_MIN_MIB).max(VOLUME_MAX_MIB);

/** Body of `POST /v1/volumes`. */
export const CreateVolumeRequestSchema = z
  .object({
    /** Name, unique per tenant among its volumes and volume snapshots (the name rule of templates). */
    name: NameSchema,
    /** Size in MiB: a write past it fails with ENOSPC. */
    sizeMiB: VolumeSizeMiBSchema,
    labels: LabelsSchema.default({}),
    /**
     * Several sandboxes may mount it read-write at once (docs/volumes.md says what each sees of another's writes).
     * Otherwise one read-write mount at a time and any number of read-only ones. @default false
     */
    shared: z.boolean().default(false),
  })
  .strict()
  .meta({ id: 'CreateVolumeRequest' });
export type CreateVolumeRequest = z.input<typeof CreateVolumeRequestSchema>;

/** One mount of a volume into a sandbox. */
export const VolumeMountSchema = z
  .object({
    volumeId: VolumeIdSchema,
    /** The volume's name. */
    name: NameSchema,
    sandboxId: SandboxIdSchema,
    /** Absolute path inside the sandbox. */
    path: z.string(),
    readOnly: z.boolean(),
  })
  .meta({ id: 'VolumeMount' });
export type VolumeMount = z.infer<typeof VolumeMountSchema>;

/** A volume: named storage of a tenant that outlives sandboxes. */
export const VolumeSchema = z
  .object({
    id: VolumeIdSchema,
    name: NameSchema,
    /** `volume`: writable; `snapshot`: a read-only point-in-time copy of `sourceId`. */
    kind: z.enum(['volume', 'snapshot']),
    sizeMiB: z.number().int(),
    /** Bytes its files occupy, or null when the server cannot read it now. */
    usedBytes: z.number().int().nullable(),
    labels: z.record(z.string(), z.string()),
    shared: z.boolean(),
    /** Where it came from: the volume it is a snapshot or fork of, and how the copy was made. */
    lineage: z.object({
      sourceId: VolumeIdSchema.nullable(),
      /** `reflink`: blocks shared with the source; `sparse-copy`: its allocated blocks copied. */
      copyMethod: z.enum(['reflink', 'sparse-copy']).nullable(),
    }),
    /** Sandboxes that mount it now (any state but deleted). */
    mounts: z.array(VolumeMountSchema),
    /** Delete it this long after it was made (snapshots with `retentionMs`), or null. */
    expiresAt: InstantSchema.nullable(),
    createdAt: InstantSchema,
    updatedAt: InstantSchema,
  })
  .meta({ id: 'Volume' });
export type Volume = z.infer<typeof VolumeSchema>;

/** Query of `GET /v1/volumes`: filter by kind, source and labels (`label=k=v`, repeatable), cursor pagination. */
export const ListVolumesQuerySchema = z
  .object({
    kind: z.enum(['volume', 'snapshot']).optional(),
    /** Only snapshots and forks of this volume. */
    sourceId: VolumeIdSchema.optional(),
    label: z
      .union([z.string(), z.array(z.string())])
      .optional()
      .transform((v) => (v === undefined ? [] : Array.isArray(v) ? v : [v]))
      .pipe(
        z.array(z.string().regex(/^[^=\0]+=[^\0]*$/, 'label filters look like key=value, without NUL bytes')).max(32),
      ),
    limit: z.coerce.number().int().min(1).max(200).default(50),
    cursor: z.string().max(512).optional(),
  })
  .meta({ id: 'ListVolumesQuery' });

/** Response of `GET /v1/volumes`. `nextCursor` is null on the last page. */
export const VolumeListSchema = z
  .object({ items: z.array(VolumeSchema), nextCursor: z.string().nullable() })
  .meta({ id: 'VolumeList' });
export type VolumeList = z.infer<typeof VolumeListSchema>;

/** Path parameters naming one volume by name or id. */
export const VolumeParamsSchema = z.object({ ref: z.string().min(1).max(64) });

/** Body of `POST /v1/volumes/{ref}/resize`. */
export const ResizeVolumeRequestSchema = z
  .object({
    /** The new size in MiB, at least the current one: volumes only grow. */
    sizeMiB: VolumeSizeMiBSchema,
  })
  .strict()
  .meta({ id: 'ResizeVolumeRequest' });
export type ResizeVolumeRequest = z.input<typeof ResizeVolumeRequestSchema>;

/** Query of `DELETE /v1/volumes/{ref}`. */
export const DeleteVolumeQuerySchema = z.object({
  /**
   * Detach it from stopped and paused sandboxes first (they lose the mount; a paused one then resumes without it
   * only if its image does not need it). A sandbox that runs still refuses. @default false
   */
  force: z
    .enum(['true', 'false', '1', '0'])
    .optional()
    .transform((v) => v === 'true' || v === '1'),
});

/** Body of `POST /v1/volumes/{ref}/snapshots` and `POST /v1/volumes/{ref}/fork`. */
export const CopyVolumeRequestSchema = z
  .object({
    /** Name of the new snapshot or volume (the volume name rule). */
    name: NameSchema,
    labels: LabelsSchema.default({}),
    /** Snapshots only: delete it this long after it is taken, ms (1 s to 365 days). @default none */
    retentionMs: z.number().int().min(1000).max(31_536_000_000).optional(),
  })
  .strict()
  .meta({ id: 'CopyVolumeRequest' });
export type CopyVolumeRequest = z.input<typeof CopyVolumeRequestSchema>;

/** Paths a volume may not be mounted at or under: gVisor's own filesystems, the sandbox's tmpfs, Burrow's files. */
export const RESERVED_MOUNT_PATHS = ['/proc', '/sys', '/dev', '/tmp'] as const;

/** One entry of a create request's `volumes`. */
export const VolumeMountRequestSchema = z
  .object({
    /** The volume (or volume snapshot) by name or id. */
    name: z.string().min(1).max(64),
    /** Absolute path inside the sandbox, not `/`, not under `/proc`, `/sys`, `/dev`, `/tmp` or `/.burrow*`. */
    path: z.string().min(1).max(1024),
    /** Mount read-only (always so for a volume snapshot). @default false */
    readOnly: z.boolean().default(false),
  })
  .strict()
  .meta({ id: 'VolumeMountRequest' });
export type VolumeMountRequest = z.input<typeof VolumeMountRequestSchema>;

/** Most volumes one sandbox mounts. */
export const MAX_SANDBOX_VOLUMES = 16;

/**
 * Why a mount path is refused, or null when it is fine: not absolute, not normalized (`.`, `..`, `//`, a trailing
 * `/`), `/` itself, or at or under a reserved path or `/.burrow*`.
 */
export function mountPathProblem(path: string): string | null {
  if (!path.startsWith('/')) return 'mount paths are absolute: start with /';
  if (path === '/') return 'a volume cannot be mounted at / (the sandbox root)';
  if (path.includes('\0')) return 'mount paths may not contain NUL bytes';
  const parts = path.slice(1).split('/');
  if (parts.some((p) => p === '' || p === '.' || p === '..')) {
    return 'write the mount path without empty, . or .. components or a trailing /';
  }
  for (const reserved of RESERVED_MOUNT_PATHS) {
    if (path === reserved || path.startsWith(`${reserved}/`)) return `${reserved} belongs to the sandbox's kernel`;
  }
  if (parts[0]?.startsWith('.burrow')) return "paths under /.burrow* are Burrow's own";
  return null;
}

/** Whether two normalized mount paths are the same or one lies under the other. */
export function mountPathsOverlap(a: string, b: string): boolean {
  return a === b || a.startsWith(`${b}/`) || b.startsWith(`${a}/`);
}

/** What `fork` does with the parent's read-write volume mounts (read-only ones are always shared). */
export const ForkVolumesSchema = z.enum(['fork', 'share-readonly', 'refuse']);
export type ForkVolumes = z.infer<typeof ForkVolumesSchema>;
