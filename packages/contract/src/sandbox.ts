import { z } from 'zod';
import { FromBucketSchema } from './buckets.js';
import { EnvSchema, InstantSchema, LabelsSchema, NameSchema, SandboxIdSchema, SandboxPathSchema } from './common.js';
import { QuarantineSchema } from './hygiene.js';
import { ExpirySchema, PolicyFieldsSchema } from './lifecycle.js';
import { NetworkPolicyRequestSchema, SandboxNetworkSchema } from './network.js';
import { SandboxSecretsRequestSchema } from './secrets.js';
import { ForkVolumesSchema, MAX_SANDBOX_VOLUMES, VolumeMountRequestSchema, VolumeMountSchema } from './volumes.js';

/** Observed sandbox states (ARCHITECTURE §3). `error` always carries a condition with a reason and is deletable. */
export const SandboxStateSchema = z.enum([
  'creating',
  'running',
  'pausing',
  'paused',
  'resuming',
  'stopping',
  'stopped',
  'deleting',
  'deleted',
  'error',
]);
export type SandboxState = z.infer<typeof SandboxStateSchema>;

/** A condition: a fact about the sandbox with a reason (for example `OOMKilled`, `RuntimeExited`). */
export const ConditionSchema = z
  .object({
    type: z.string(),
    status: z.enum(['true', 'false']),
    reason: z.string(),
    message: z.string(),
    at: InstantSchema,
  })
  .meta({ id: 'Condition' });
export type Condition = z.infer<typeof ConditionSchema>;

/** States the API can ask for; the reconciler moves the observed state toward it. */
export const DesiredStateSchema = z.enum(['running', 'paused', 'stopped', 'deleted']);
export type DesiredState = z.infer<typeof DesiredStateSchema>;

/** Resource limits of a sandbox. */
export const ResourcesSchema = z
  .object({
    /** CPU cores (fractions allowed), enforced as a CFS quota. @default 1 */
    cpuCount: z.number().min(0.1).max(64),
    /** Memory limit in MiB, enforced by the sandbox's memory cgroup. @default 512 */
    memoryMiB: z.number().int().min(64).max(262_144),
    /** Disk limit in MiB for the sandbox's writable layer. @default 2048 (2 GiB) */
    diskMiB: z.number().int().min(64).max(1_048_576),
  })
  .meta({ id: 'Resources' });
export type Resources = z.infer<typeof ResourcesSchema>;

/** Default limits applied when a create request leaves them out. */
export const DEFAULT_RESOURCES: Resources = { cpuCount: 1, memoryMiB: 512, diskMiB: 2048 };

/** Body of `POST /v1/sandboxes`. */
export const CreateSandboxRequestSchema = z
  .object({
    /** Template name. @default 'base' */
    template: NameSchema.default('base'),
    /** Default environment for every command. */
    env: EnvSchema.default({}),
    /** Default working directory for every command. @default '/root' */
    cwd: SandboxPathSchema.default('/root'),
    cpuCount: ResourcesSchema.shape.cpuCount.optional(),
    memoryMiB: ResourcesSchema.shape.memoryMiB.optional(),
    diskMiB: ResourcesSchema.shape.diskMiB.optional(),
    labels: LabelsSchema.default({}),
    /**
     * Running-time TTL in ms (1 s to 30 days): the clock runs while the sandbox runs and stops while it is paused.
     * `null` for none. Left out: the server default (BURROW_DEFAULT_TIMEOUT_MS; built in: none).
     */
    timeoutMs: z.number().int().min(1000).max(2_592_000_000).nullable().optional(),
    /** What the TTL does when it runs out: `pause`, `stop` or `delete`. Left out: the server default (built in: `delete`). */
    timeoutAction: PolicyFieldsSchema.shape.timeoutAction.optional(),
    /** Pause after this long without activity, ms; `null`: never. Left out: the server default (built in: 900_000, 15 minutes). */
    idleTimeoutMs: PolicyFieldsSchema.shape.idleTimeoutMs.optional(),
    /** Delete this long after creation whatever else happens, ms; `null`: none. Left out: the server default (built in: none). */
    maxAgeMs: PolicyFieldsSchema.shape.maxAgeMs.optional(),
    /** Delete after staying paused this long, ms; `null`: keep. Left out: the server default (built in: keep). */
    pausedRetentionMs: PolicyFieldsSchema.shape.pausedRetentionMs.optional(),
    /** Keep only the newest N snapshots of this sandbox; `null`: all. Left out: the server default (built in: all). */
    snapshotKeepLast: PolicyFieldsSchema.shape.snapshotKeepLast.optional(),
    /** Resume a paused sandbox on an exec or files call; when false those calls fail with `sandbox_paused`. @default true */
    autoResume: z.boolean().default(true),
    /** Start from this snapshot (name or `snp_` id) instead of the template; the snapshot's template is used. */
    fromSnapshot: z.string().min(1).max(64).optional(),
    /** With `fromSnapshot`: restore processes and memory (the snapshot must hold them); false boots on its files only. @default true */
    restoreMemory: z.boolean().default(true),
    /** Network policy (see docs/network.md). @default the server's `BURROW_NETWORK_DEFAULT` mode with no rules */
    network: NetworkPolicyRequestSchema.optional(),
    /**
     * Secrets (names, or `{ name, env }`) whose placeholders go into env vars; requests to each secret's hosts carry
     * its value instead (docs/network.md "Secrets at egress"). Unknown names: `unknown_secret`. @default []
     */
    secrets: SandboxSecretsRequestSchema.optional(),
    /** Fill a directory from a named bucket's prefix before the create answers (see docs/s3.md). */
    fromBucket: FromBucketSchema.optional(),
    /** Volumes to mount (docs/volumes.md), at most 16; mounts are fixed at create. @default none */
    volumes: z.array(VolumeMountRequestSchema).max(MAX_SANDBOX_VOLUMES).default([]),
  })
  .strict()
  .meta({ id: 'CreateSandboxRequest' });
export type CreateSandboxRequest = z.input<typeof CreateSandboxRequestSchema>;

/** A sandbox as the API shows it. */
export const SandboxSchema = z
  .object({
    id: SandboxIdSchema,
    template: NameSchema,
    /** Content address of the template the sandbox started from. */
    templateId: z.string(),
    state: SandboxStateSchema,
    conditions: z.array(ConditionSchema),
    env: z.record(z.string(), z.string()),
    cwd: z.string(),
    hostname: z.string(),
    resources: ResourcesSchema,
    labels: z.record(z.string(), z.string()),
    timeoutMs: z.number().int().nullable(),
    timeoutAction: PolicyFieldsSchema.shape.timeoutAction,
    idleTimeoutMs: z.number().int().nullable(),
    maxAgeMs: z.number().int().nullable(),
    pausedRetentionMs: z.number().int().nullable(),
    snapshotKeepLast: z.number().int().nullable(),
    /** When the next policy action is due (ISO-8601; `expiry.at`), or null when no policy applies now. */
    expiresAt: InstantSchema.nullable(),
    /** The next policy deadline: when, the action then, and the policy behind it. */
    expiry: ExpirySchema.nullable(),
    /** When the sandbox pauses for idleness (ISO-8601); null without an idle policy, when not running, or while busy. */
    idleDeadlineAt: InstantSchema.nullable(),
    /** When the TTL (`timeoutMs`) runs out (ISO-8601), or null. Keepalive and PATCH move it. */
    timeoutAt: InstantSchema.nullable(),
    /** The state the server is moving the sandbox to (`state` is what it observed last). */
    desiredState: DesiredStateSchema,
    /** Whether an exec or files call resumes the sandbox when it is paused. */
    autoResume: z.boolean(),
    /** Which layers the sandbox keeps now: its files always; its processes and memory while paused (image on disk) or running. */
    keeps: z.object({ filesystem: z.boolean(), memory: z.boolean() }),
    /** Where the sandbox came from: the sandbox it was forked from and the snapshot it was restored from. */
    lineage: z.object({ parentId: SandboxIdSchema.nullable(), snapshotId: z.string().nullable() }),
    /** Set while the sandbox is quarantined (no exec or writes except by an admin key; policies leave it alone). */
    quarantine: QuarantineSchema.nullable().optional(),
    /** The network policy in force (and, on a single sandbox, its byte counts). */
    network: SandboxNetworkSchema.optional(),
    /**
     * Where each lifecycle policy's value comes from: `request` (the create request or a PATCH), `tenant-default`
     * (the tenant's admin) or `server-default` (the operator's BURROW_DEFAULT_*). Absent on sandboxes created before
     * the server recorded it.
     */
    policySources: z.record(z.string(), z.enum(['request', 'tenant-default', 'server-default'])).optional(),
    /** The volumes it mounts, in the order of the create request. */
    volumes: z.array(VolumeMountSchema).optional(),
    createdAt: InstantSchema,
    updatedAt: InstantSchema,
  })
  .meta({ id: 'Sandbox' });
export type Sandbox = z.infer<typeof SandboxSchema>;

/** Query of `GET /v1/sandboxes`: filter by state and labels (`label=k=v`, repeatable), cursor pagination. */
export const ListSandboxesQuerySchema = z
  .object({
    state: SandboxStateSchema.optional(),
    label: z
      .union([z.string(), z.array(z.string())])
      .optional()
      .transform((v) => (v === undefined ? [] : Array.isArray(v) ? v : [v]))
      .pipe(
        z.array(z.string().regex(/^[^=\0]+=[^\0]*$/, 'label filters look like key=value, without NUL bytes')).max(32),
      ),
    limit: z.coerce.number().int().min(1).max(200).default(50),
    cursor: z.string().max(512).optional(),
    /** Only sandboxes forked from this one. */
    parentId: SandboxIdSchema.optional(),
  })
  .meta({ id: 'ListSandboxesQuery' });

/** Response of `GET /v1/sandboxes`. `nextCursor` is null on the last page. */
export const SandboxListSchema = z
  .object({ items: z.array(SandboxSchema), nextCursor: z.string().nullable() })
  .meta({ id: 'SandboxList' });
export type SandboxList = z.infer<typeof SandboxListSchema>;

/** Path parameters naming one sandbox. */
export const SandboxParamsSchema = z.object({ id: SandboxIdSchema });

/** Most sandboxes one fork call makes. */
export const MAX_FORK_COUNT = 20;

/** Body of `POST /v1/sandboxes/{id}/fork`. */
export const ForkSandboxRequestSchema = z
  .object({
    /** How many children to make (1–20). @default 1 */
    count: z.number().int().min(1).max(MAX_FORK_COUNT).default(1),
    /**
     * What each child gets of the parent's read-write volume mounts (read-only ones are shared): `fork`, a
     * copy of its own per child (a new volume named `<volume>-<child id>`); `share-readonly`, the same volume
     * mounted read-only; `refuse`, fail with `volume_mount_conflict`. A `shared` volume stays shared read-write
     * under `fork`. @default 'fork'
     */
    volumes: ForkVolumesSchema.default('fork'),
  })
  .strict()
  .meta({ id: 'ForkSandboxRequest' });
export type ForkSandboxRequest = z.input<typeof ForkSandboxRequestSchema>;

/** Response of a fork: the new sandboxes, running. */
export const ForkSandboxResponseSchema = z
  .object({ items: z.array(SandboxSchema) })
  .meta({ id: 'ForkSandboxResponse' });
export type ForkSandboxResponse = z.infer<typeof ForkSandboxResponseSchema>;
