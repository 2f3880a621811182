import { z } from 'zod';
import { ApiKeyIdSchema, InstantSchema, NameSchema } from './common.js';

/** `admin` keys manage keys and templates for every tenant; `member` keys use their own tenant's sandboxes. */
export const ApiKeyRoleSchema = z.enum(['admin', 'member']);

/** An API key as listed (the secret is never shown again after creation). */
export const ApiKeySchema = z
  .object({
    id: ApiKeyIdSchema,
    name: z.string(),
    tenantId: z.string(),
    role: ApiKeyRoleSchema,
    /** First characters of the secret, to recognise it. */
    prefix: z.string(),
    createdAt: InstantSchema,
    revokedAt: InstantSchema.nullable(),
  })
  .meta({ id: 'ApiKey' });
export type ApiKey = z.infer<typeof ApiKeySchema>;

/** Body of `POST /v1/keys`. Only admin keys may name another tenant or the admin role. */
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
  })
  .strict()
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
