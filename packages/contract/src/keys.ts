import { z } from 'zod';
import { ApiKeyIdSchema, InstantSchema, LabelsSchema, NameSchema, SandboxIdSchema } from './common.js';

/**
 * `admin` keys manage keys, quotas and templates for every tenant; `member` keys use their own tenant's sandboxes;
 * `viewer` keys read everything of their own tenant and change nothing.
 */
export const ApiKeyRoleSchema = z.enum(['admin', 'member', 'viewer']);
export type ApiKeyRole = z.infer<typeof ApiKeyRoleSchema>;

/**
 * What a key may reach, one scope per route (docs/security.md lists each route's scope): `sandboxes:read` (list,
 * info, inspect, quota), `sandboxes:write` (create, delete, fork, pause, resume, stop, start, reset, PATCH, network,
 * keepalive, quarantine), `commands` (exec, background commands), `files`, `snapshots`, `templates:read`,
 * `templates:write`, `events` (events and their stream), `webhooks`, `keys` (list, create and revoke keys), `audit`
 * (the audit log), `usage` (usage metering), `secrets` (secrets substituted at egress: set, rotate, list, delete;
 * values are never readable), `buckets` (named bucket credentials: add, list, remove), `volumes`
 * (volumes, their snapshots, forks and files), `admin` (other tenants, quotas, tenant defaults, metrics).
 */
export const KeyScopeSchema = z.enum([
  'sandboxes:read',
  'sandboxes:write',
  'commands',
  'files',
  'snapshots',
  'templates:read',
  'templates:write',
  'events',
  'webhooks',
  'keys',
  'audit',
  'usage',
  'secrets',
  'buckets',
  'volumes',
  'admin',
]);
export type KeyScope = z.infer<typeof KeyScopeSchema>;
/** Every scope, in a stable order. */
export const KEY_SCOPES: readonly KeyScope[] = KeyScopeSchema.options;

/**
 * Which sandboxes a key reaches: one sandbox by id, or every sandbox whose labels include all of `labels`. A route
 * naming any other sandbox answers `sandbox_not_found` (404), as for an unknown id; a route that names no sandbox
 * (lists, creates, templates, events) or creates one (fork) answers `forbidden` (403).
 */
export const KeyRestrictionSchema = z
  .discriminatedUnion('type', [
    z.object({ type: z.literal('sandbox'), sandboxId: SandboxIdSchema }).strict(),
    z
      .object({
        type: z.literal('labels'),
        labels: LabelsSchema.refine((l) => Object.keys(l).length > 0, 'a label restriction names at least one label'),
      })
      .strict(),
  ])
  .meta({ id: 'KeyRestriction' });
export type KeyRestriction = z.infer<typeof KeyRestrictionSchema>;

/** {@link KeyRestrictionSchema} as the server answers it (no input refinements, so clients parse it fast). */
export const KeyRestrictionViewSchema = z
  .discriminatedUnion('type', [
    z.object({ type: z.literal('sandbox'), sandboxId: z.string() }),
    z.object({ type: z.literal('labels'), labels: z.record(z.string(), z.string()) }),
  ])
  .meta({ id: 'KeyRestrictionView' });

/** An API key as listed (the secret is never shown again after creation). */
export const ApiKeySchema = z
  .object({
    id: ApiKeyIdSchema,
    name: z.string(),
    tenantId: z.string(),
    role: ApiKeyRoleSchema,
    /** Scopes the key holds; null: every scope its role allows (keys created without `scopes`). */
    scopes: z.array(KeyScopeSchema).nullable(),
    /** The sandboxes the key reaches; null: every sandbox of its tenant. */
    restriction: KeyRestrictionViewSchema.nullable(),
    /** First characters of the secret, to recognise it. */
    prefix: z.string(),
    createdAt: InstantSchema,
    /** When the key stops working; null: never. */
    expiresAt: InstantSchema.nullable(),
    revokedAt: InstantSchema.nullable(),
    /** Last successful authentication, to the second (updated at most once a second per server); null: never used. */
    lastUsedAt: InstantSchema.nullable(),
  })
  .meta({ id: 'ApiKey' });
export type ApiKey = z.infer<typeof ApiKeySchema>;

/**
 * Body of `POST /v1/keys`. Only admin keys may name another tenant or the admin role; a member key creates member
 * or viewer keys of its own tenant holding at most its own scopes and expiring no later than itself.
 */
export const CreateApiKeyRequestSchema = z
  .object({
    name: z
      .string()
      .min(1)
      .max(128)
      .refine((n) => !n.includes('\0'), 'key names may not contain NUL bytes'),
    /** Tenant the key acts for. @default the caller's tenant */
    tenantId: NameSchema.optional(),
    role: ApiKeyRoleSchema.default('member'),
    /**
     * Secret format: `bk` (`bk_` + 32 base32 characters) or `e2b` (`e2b_` + 40 hex characters, the form E2B's clients
     * up to 2.45 and its Python SDK check before sending). Both carry 160 random bits. @default 'bk'
     */
    format: z.enum(['bk', 'e2b']).default('bk'),
    /** Scopes the key holds (at least one, no repeats). @default every scope its role allows */
    scopes: z
      .array(KeyScopeSchema)
      .min(1)
      .refine((s) => new Set(s).size === s.length, 'list each scope once')
      .optional(),
    /** Restrict the key to one sandbox or a label selector. @default every sandbox of the tenant */
    restriction: KeyRestrictionSchema.optional(),
    /** Lifetime from now, ms (1 s to 10 years). Exclusive with `expiresAt`. @default no expiry */
    ttlMs: z
      .number()
      .int()
      .min(1000)
      .max(10 * 365 * 24 * 3600 * 1000)
      .optional(),
    /** When the key stops working; must be in the future. Exclusive with `ttlMs`. @default no expiry */
    expiresAt: InstantSchema.optional(),
  })
  .strict()
  .refine((r) => r.ttlMs === undefined || r.expiresAt === undefined, {
    message: 'pass ttlMs or expiresAt, not both',
    path: ['ttlMs'],
  })
  .meta({ id: 'CreateApiKeyRequest' });
export type CreateApiKeyRequest = z.input<typeof CreateApiKeyRequestSchema>;

/** Response of `POST /v1/keys`: the key and its secret, shown only this once. */
export const CreatedApiKeySchema = z.object({ key: ApiKeySchema, secret: z.string() }).meta({ id: 'CreatedApiKey' });

export const ApiKeyListSchema = z.object({ items: z.array(ApiKeySchema) }).meta({ id: 'ApiKeyList' });
export const ApiKeyParamsSchema = z.object({ id: ApiKeyIdSchema });

/** Response of `GET /v1/health` (no key needed). */
export const HealthSchema = z
  .object({ status: z.literal('ok'), version: z.string(), runtime: z.string() })
  .meta({ id: 'Health' });
