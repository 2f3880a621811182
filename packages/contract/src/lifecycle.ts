import { z } from 'zod';
import { EnvSchema, InstantSchema, NameSchema, SandboxIdSchema } from './common.js';
import { EVENT_TYPES } from './event-types.js';

export { EVENT_TYPES } from './event-types.js';

/** Longest policy duration: 30 days in ms. */
export const MAX_POLICY_MS = 2_592_000_000;

const policyMs = (min: number) => z.number().int().min(min).max(MAX_POLICY_MS);

/** What the TTL (`timeoutMs`) does when it runs out. */
export const TimeoutActionSchema = z.enum(['pause', 'stop', 'delete']);
export type TimeoutAction = z.infer<typeof TimeoutActionSchema>;

/**
 * Lifecycle policies a sandbox can carry besides `timeoutMs`; each is off when null. Shared by create
 * (defaults applied) and `PATCH /v1/sandboxes/{id}` (only the fields given change).
 */
export const PolicyFieldsSchema = z.object({
  /** What the TTL does when it runs out. @default 'delete' */
  timeoutAction: TimeoutActionSchema,
  /** Pause after this long without activity (a running command, an open exec/PTY/WebSocket stream, a file call, a keepalive), ms (1 s to 30 days). null: never. */
  idleTimeoutMs: policyMs(1000).nullable(),
  /** Hard end: delete this long after creation whatever else happens, ms (1 s to 30 days). null: none. */
  maxAgeMs: policyMs(1000).nullable(),
  /** Delete after staying paused this long, ms (1 s to 30 days). null: keep paused sandboxes. */
  pausedRetentionMs: policyMs(1000).nullable(),
  /** Keep only the newest N snapshots taken of this sandbox (0–1000); older ones are deleted. null: keep all. */
  snapshotKeepLast: z.number().int().min(0).max(1000).nullable(),
});

/** The action a policy takes at its deadline. */
export const PolicyActionSchema = z.enum(['pause', 'stop', 'delete']);

/** Which policy set a deadline. */
export const ExpiryReasonSchema = z.enum(['timeout', 'idle', 'max-age', 'paused-retention', 'snapshot-retention']);

/** The next deadline of a sandbox or snapshot: when, what happens, and which policy asks for it. */
export const ExpirySchema = z
  .object({
    /** When the action is due (ISO-8601). A deletion happens only after its `warning` event, at least `BURROW_EXPIRY_WARNING_MS` after it. */
    at: InstantSchema,
    action: PolicyActionSchema,
    reason: ExpiryReasonSchema,
  })
  .meta({ id: 'Expiry' });
export type Expiry = z.infer<typeof ExpirySchema>;

/** Body of `PATCH /v1/sandboxes/{id}`: change policies; fields left out stay as they are. */
export const UpdateSandboxRequestSchema = z
  .object({
    /** New TTL, counted from now (may shorten the current deadline: this call names it). null: no TTL. */
    timeoutMs: policyMs(1000).nullable().optional(),
    timeoutAction: TimeoutActionSchema.optional(),
    idleTimeoutMs: PolicyFieldsSchema.shape.idleTimeoutMs.optional(),
    maxAgeMs: PolicyFieldsSchema.shape.maxAgeMs.optional(),
    pausedRetentionMs: PolicyFieldsSchema.shape.pausedRetentionMs.optional(),
    snapshotKeepLast: PolicyFieldsSchema.shape.snapshotKeepLast.optional(),
    /**
     * The sandbox's default environment, replacing the whole of it (a name left out is removed), validated as on
     * create. Commands started afterwards and fork children made afterwards get it; running processes keep theirs.
     */
    env: EnvSchema.optional(),
  })
  .strict()
  .refine((b) => Object.keys(b).length > 0, 'name at least one policy (or env) to change')
  .meta({ id: 'UpdateSandboxRequest' });
export type UpdateSandboxRequest = z.input<typeof UpdateSandboxRequestSchema>;

/** Body of `POST /v1/sandboxes/{id}/keepalive`. */
export const KeepaliveRequestSchema = z
  .object({
    /** Count the sandbox as active for this long from now (a lease), ms (0 to 24 hours). @default 0 (just now) */
    durationMs: z.number().int().min(0).max(86_400_000).default(0),
    /** Push the TTL deadline to now + `timeoutMs` (never earlier than it is). @default true */
    extendTimeout: z.boolean().default(true),
  })
  .strict()
  .meta({ id: 'KeepaliveRequest' });
export type KeepaliveRequest = z.input<typeof KeepaliveRequestSchema>;

/** Kinds of lifecycle event ({@link EVENT_TYPES}). */
export const EventTypeSchema = z.enum(EVENT_TYPES);
export type EventType = z.infer<typeof EventTypeSchema>;

/** One recorded transition. `id` is a decimal sequence number: later events have larger ids. */
export const EventSchema = z
  .object({
    id: z.string(),
    type: EventTypeSchema,
    sandboxId: SandboxIdSchema.nullable(),
    snapshotId: z.string().nullable(),
    /** Machine-readable cause, for example `UserRequest`, `IdleTimeout`, `TimeoutExpired`, `MaxAge`, `QuotaExceeded`. */
    reason: z.string(),
    /** Who caused it: an API key id (`key_…`) or `system:reconciler`. */
    actor: z.string(),
    message: z.string(),
    /** Extra facts (for a warning: `deleteAt`, `policy`; for a fork: `parentId`). */
    data: z.record(z.string(), z.unknown()),
    at: InstantSchema,
  })
  .meta({ id: 'Event' });
export type Event = z.infer<typeof EventSchema>;

/** Query of `GET /v1/events` and `GET /v1/events/stream`. */
export const ListEventsQuerySchema = z.object({
  sandboxId: SandboxIdSchema.optional(),
  type: z
    .union([EventTypeSchema, z.array(EventTypeSchema)])
    .optional()
    .transform((v) => (v === undefined ? [] : Array.isArray(v) ? v : [v])),
  limit: z.coerce.number().int().min(1).max(500).default(100),
  /** Only events after this one (the `nextCursor` of the previous page, or an event id). */
  cursor: z
    .string()
    .regex(/^\d{1,18}$/, 'the cursor is an event id (digits)')
    .optional(),
});

/** Response of `GET /v1/events`, oldest first. `nextCursor` is the last id returned (null when the page is empty). */
export const EventListSchema = z
  .object({ items: z.array(EventSchema), nextCursor: z.string().nullable() })
  .meta({ id: 'EventList' });
export type EventList = z.infer<typeof EventListSchema>;

/** Body of `POST /v1/webhooks`. */
export const CreateWebhookRequestSchema = z
  .object({
    /** http(s) URL that receives each event as a JSON POST. */
    url: z
      .url({ protocol: /^https?$/ })
      .max(2048)
      .describe('http or https URL'),
    /** Signing secret, 16–256 characters. @default generated and shown once in the response */
    secret: z.string().min(16).max(256).optional(),
    /** Only these event types. @default every type */
    types: z.array(EventTypeSchema).max(32).optional(),
  })
  .strict()
  .meta({ id: 'CreateWebhookRequest' });
export type CreateWebhookRequest = z.input<typeof CreateWebhookRequestSchema>;

/** A registered webhook (the secret is shown only on creation). */
export const WebhookSchema = z
  .object({
    id: z.string(),
    url: z.string(),
    types: z.array(EventTypeSchema).nullable(),
    createdAt: InstantSchema,
    /** Deliveries by state. */
    deliveries: z.object({ pending: z.number().int(), delivered: z.number().int(), failed: z.number().int() }),
  })
  .meta({ id: 'Webhook' });
export type Webhook = z.infer<typeof WebhookSchema>;

/** Response of `POST /v1/webhooks`: the webhook and its secret, shown only this once. */
export const CreatedWebhookSchema = z
  .object({ webhook: WebhookSchema, secret: z.string() })
  .meta({ id: 'CreatedWebhook' });
export const WebhookListSchema = z.object({ items: z.array(WebhookSchema) }).meta({ id: 'WebhookList' });
export const WebhookParamsSchema = z.object({
  id: z.string().regex(/^whk_[0-9a-hjkmnp-tv-z]{20}$/, 'must look like whk_ followed by 20 base32 characters'),
});

/** Per-tenant limits; null means unlimited. */
export const QuotaLimitsSchema = z
  .object({
    /** Sandboxes running (or creating, resuming) at once. */
    maxRunning: z.number().int().min(0).max(1_000_000).nullable(),
    /** Sandboxes in any state. */
    maxSandboxes: z.number().int().min(0).max(1_000_000).nullable(),
    /** Sum of the sandboxes' disk limits (`diskMiB` × 1 MiB), bytes. */
    maxDiskBytes: z.number().int().min(0).nullable(),
    /** Snapshots kept. */
    maxSnapshots: z.number().int().min(0).max(1_000_000).nullable(),
    /** Volumes, volume snapshots and forks kept. */
    maxVolumes: z.number().int().min(0).max(1_000_000).nullable(),
    /** Sum of their sizes (`sizeMiB` × 1 MiB), bytes. */
    maxVolumeBytes: z.number().int().min(0).nullable(),
  })
  .meta({ id: 'QuotaLimits' });
export type QuotaLimits = z.infer<typeof QuotaLimitsSchema>;

/** Response of `GET /v1/quota`: the caller's tenant's limits and what it uses now. */
export const QuotaSchema = z
  .object({
    tenantId: NameSchema,
    limits: QuotaLimitsSchema,
    usage: z.object({
      running: z.number().int(),
      sandboxes: z.number().int(),
      diskBytes: z.number().int(),
      snapshots: z.number().int(),
      volumes: z.number().int(),
      volumeBytes: z.number().int(),
    }),
  })
  .meta({ id: 'Quota' });
export type Quota = z.infer<typeof QuotaSchema>;

/** Body of `PUT /v1/tenants/{tenant}/quota` (admin keys only): the limits, replacing the old ones. */
export const SetQuotaRequestSchema = QuotaLimitsSchema.partial()
  .strict()
  .transform((q) => ({
    maxRunning: q.maxRunning ?? null,
    maxSandboxes: q.maxSandboxes ?? null,
    maxDiskBytes: q.maxDiskBytes ?? null,
    maxSnapshots: q.maxSnapshots ?? null,
    maxVolumes: q.maxVolumes ?? null,
    maxVolumeBytes: q.maxVolumeBytes ?? null,
  }))
  .meta({ id: 'SetQuotaRequest' });
export const TenantParamsSchema = z.object({ tenant: NameSchema });
