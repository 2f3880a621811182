import { z } from 'zod';
import { NameSchema } from './common.js';
import { MAX_POLICY_MS, PolicyFieldsSchema, TimeoutActionSchema } from './lifecycle.js';

/**
 * A tenant's lifecycle policy defaults, set by an admin. A field left out inherits the server default
 * (BURROW_DEFAULT_*); null turns that policy off for the tenant's new sandboxes.
 */
export const TenantPolicyDefaultsSchema = z
  .object({
    /** Running-time TTL, ms (1 s to 30 days); null: none. */
    timeoutMs: z.number().int().min(1000).max(MAX_POLICY_MS).nullable().optional(),
    timeoutAction: TimeoutActionSchema.optional(),
    idleTimeoutMs: PolicyFieldsSchema.shape.idleTimeoutMs.optional(),
    maxAgeMs: PolicyFieldsSchema.shape.maxAgeMs.optional(),
    pausedRetentionMs: PolicyFieldsSchema.shape.pausedRetentionMs.optional(),
    snapshotKeepLast: PolicyFieldsSchema.shape.snapshotKeepLast.optional(),
    /**
     * The longest `maxAgeMs` a create request of this tenant may ask for, ms; with it set, a request without a
     * max age (or with null) gets this limit. Left out: no limit.
     */
    maxAgeLimitMs: z.number().int().min(1000).max(MAX_POLICY_MS).optional(),
  })
  .strict()
  .meta({ id: 'TenantPolicyDefaults' });
export type TenantPolicyDefaults = z.infer<typeof TenantPolicyDefaultsSchema>;

/** The policies a create request of the tenant gets when it leaves them out, with where each comes from. */
export const EffectivePolicyDefaultsSchema = z
  .object({
    timeoutMs: z.number().int().nullable(),
    timeoutAction: TimeoutActionSchema,
    idleTimeoutMs: z.number().int().nullable(),
    maxAgeMs: z.number().int().nullable(),
    pausedRetentionMs: z.number().int().nullable(),
    snapshotKeepLast: z.number().int().nullable(),
  })
  .meta({ id: 'EffectivePolicyDefaults' });

/** Response of `GET`/`PUT /v1/tenants/{tenant}/defaults`. */
export const TenantDefaultsSchema = z
  .object({
    tenantId: NameSchema,
    /** What the admin set (fields left out inherit the server default). */
    set: TenantPolicyDefaultsSchema,
    /** What a create request that names no policy gets. */
    effective: EffectivePolicyDefaultsSchema,
    /** Per policy: `tenant-default` or `server-default`. */
    sources: z.record(z.string(), z.enum(['tenant-default', 'server-default'])),
  })
  .meta({ id: 'TenantDefaults' });
export type TenantDefaults = z.infer<typeof TenantDefaultsSchema>;
