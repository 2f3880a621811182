import { z } from 'zod';
import { InstantSchema, NameSchema } from './common.js';

/** How a recorded request ended: `ok` (2xx/3xx), `refused` (401, 403, 404 from a key's restriction, 429), `failed`. */
export const AuditResultSchema = z.enum(['ok', 'refused', 'failed']);
export type AuditResult = z.infer<typeof AuditResultSchema>;

/**
 * One audit record: a request that changed something or was refused. Never holds secret values, file contents or
 * command lines (those only with the operator's `BURROW_AUDIT_COMMAND_LINES=1`, in `details.cmd`).
 */
export const AuditRecordSchema = z
  .object({
    /** Decimal sequence number: later records have larger ids, with no gaps. */
    id: z.string(),
    at: InstantSchema,
    /** The tenant the request acted for; null when no key was accepted. */
    tenantId: z.string().nullable(),
    keyId: z.string().nullable(),
    keyName: z.string().nullable(),
    /** The client's address as the server saw it. */
    sourceAddress: z.string(),
    requestId: z.string(),
    /** `METHOD /route/pattern`, e.g. `DELETE /v1/sandboxes/:id`. */
    action: z.string(),
    /** What the request named: a sandbox, key, snapshot, template, webhook or tenant id; null for none. */
    target: z.string().nullable(),
    result: AuditResultSchema,
    /** The HTTP status answered. */
    status: z.number().int(),
    /** The stable error code of a refusal or failure. */
    errorCode: z.string().nullable(),
    details: z.record(z.string(), z.unknown()).nullable(),
    /** sha256 (hex) of the record before this one; 64 zeros for the first. */
    prevHash: z.string(),
    /** sha256 (hex) of this record's fields and `prevHash`. */
    hash: z.string(),
  })
  .meta({ id: 'AuditRecord' });
export type AuditRecord = z.infer<typeof AuditRecordSchema>;

/** Query of `GET /v1/audit`. `from` and `to` bound `at` (from inclusive, to exclusive). */
export const ListAuditQuerySchema = z
  .object({
    from: InstantSchema.optional(),
    to: InstantSchema.optional(),
    /** Another tenant's records (admin keys); absent: the caller's tenant, or every tenant for an admin key. */
    tenant: NameSchema.optional(),
    keyId: z.string().max(64).optional(),
    target: z.string().max(128).optional(),
    result: AuditResultSchema.optional(),
    /** Action prefix, e.g. `DELETE` or `POST /v1/sandboxes`. */
    action: z.string().max(200).optional(),
    limit: z.coerce.number().int().min(1).max(1000).default(100),
    /** Only records after this one (the previous page's `nextCursor`, or a record id). */
    cursor: z
      .string()
      .regex(/^\d{1,18}$/, 'the cursor is an audit record id (digits)')
      .optional(),
  })
  .refine((q) => q.from === undefined || q.to === undefined || Date.parse(q.from) <= Date.parse(q.to), {
    message: '`from` is after `to`',
    path: ['from'],
  });

/** Response of `GET /v1/audit`, oldest first; `nextCursor` is the last id returned (null for an empty page). */
export const AuditListSchema = z
  .object({ items: z.array(AuditRecordSchema), nextCursor: z.string().nullable() })
  .meta({ id: 'AuditList' });
export type AuditList = z.infer<typeof AuditListSchema>;

/** One break in the audit chain. */
export const AuditProblemSchema = z
  .object({
    /** The record concerned (for `removed`: the first missing id). */
    id: z.string(),
    /** `edited`: its fields no longer hash to its hash, or the next record chains to another hash; `removed`: missing from the chain. */
    kind: z.enum(['edited', 'removed']),
    message: z.string(),
  })
  .meta({ id: 'AuditProblem' });

/** Response of `GET /v1/audit/verify`: the whole chain checked from the retention anchor on. */
export const AuditVerifySchema = z
  .object({
    ok: z.boolean(),
    /** Records checked. */
    checked: z.number().int(),
    /** Records before this id were removed by retention (null: none). */
    prunedThrough: z.string().nullable(),
    problems: z.array(AuditProblemSchema),
  })
  .meta({ id: 'AuditVerify' });
export type AuditVerify = z.infer<typeof AuditVerifySchema>;
