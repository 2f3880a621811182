import { z } from 'zod';
import { InstantSchema, SandboxIdSchema } from './common.js';

/** Header that carries a sandbox's access token on a request to one of its private preview URLs. */
export const PREVIEW_ACCESS_HEADER = 'X-Burrow-Access-Token';
/** Query parameter of a signed preview URL (`<expiresAtMs>.<signature>`); the server moves it into a cookie. */
export const PREVIEW_SIGNATURE_PARAM = 'burrow_signature';
/** Cookie a signed preview URL sets, scoped to its own host. */
export const PREVIEW_COOKIE = 'burrow_preview';
/** Longest life of a signed preview URL, ms (7 days). */
export const MAX_PREVIEW_TTL_MS = 7 * 24 * 3600 * 1000;
/** Life of a signed preview URL whose request names none, ms (1 hour). */
export const DEFAULT_PREVIEW_TTL_MS = 3600 * 1000;

/** A TCP port inside a sandbox: 1–65535. */
export const PortNumberSchema = z.number().int().min(1, 'ports are 1-65535').max(65535, 'ports are 1-65535');

/** Path of the port routes: `/v1/sandboxes/{id}/ports/{port}` (the port as decimal text). */
export const SandboxPortParamsSchema = z.object({
  id: SandboxIdSchema,
  port: z
    .string()
    .regex(/^\d{1,5}$/, 'ports are 1-65535')
    .transform(Number)
    .pipe(PortNumberSchema),
});

/** `POST /v1/sandboxes/{id}/ports/{port}/url`: a preview URL of the port, and whether the port is public. */
export const PortUrlRequestSchema = z
  .object({
    /**
     * `true`: the port becomes public (its URL answers anyone); `false`: private again (the access token or a signed
     * URL is needed). @default the port's current access (private unless made public)
     */
    public: z.boolean().optional(),
    /** A signed URL that works without the access token until it expires (it sets a cookie for its host). @default false */
    signed: z.boolean().default(false),
    /** Life of a signed URL, ms (1 s to 7 days). @default 3_600_000 (1 hour) */
    ttlMs: z.number().int().min(1000).max(MAX_PREVIEW_TTL_MS).optional(),
  })
  .strict()
  .superRefine((body, ctx) => {
    if (body.ttlMs !== undefined && !body.signed) {
      ctx.addIssue({
        code: 'custom',
        path: ['ttlMs'],
        message: 'ttlMs applies only to a signed URL: add signed: true',
      });
    }
  })
  .meta({ id: 'PortUrlRequest' });
export type PortUrlRequest = z.input<typeof PortUrlRequestSchema>;

/** A preview URL of a sandbox port. */
export const PortUrlSchema = z
  .object({
    port: z.number().int(),
    /** `http://<port>-<sandbox label>.<previewDomain>:<serverPort>/` (plus the signature of a signed URL). */
    url: z.string(),
    /** Whether the port answers anyone (no token). */
    public: z.boolean(),
    /** When a signed URL stops working; null for an unsigned one. */
    expiresAt: InstantSchema.nullable(),
    /**
     * The sandbox's access token, for the `X-Burrow-Access-Token` header of a private, unsigned URL; null for a
     * public or signed one.
     */
    accessToken: z.string().nullable(),
  })
  .meta({ id: 'PortUrl' });
export type PortUrl = z.infer<typeof PortUrlSchema>;

/** A TCP port something listens on inside a sandbox. */
export const ListeningPortSchema = z
  .object({
    port: z.number().int(),
    /** Address the socket is bound to inside (`0.0.0.0`, `127.0.0.1`, `::`): loopback-only ones are not reachable. */
    address: z.string(),
    public: z.boolean(),
    /** The port's preview URL (unsigned). */
    url: z.string(),
  })
  .meta({ id: 'ListeningPort' });
export type ListeningPort = z.infer<typeof ListeningPortSchema>;

/** `GET /v1/sandboxes/{id}/ports`: the TCP ports listening inside a running sandbox, by port. */
export const PortListSchema = z.object({ ports: z.array(ListeningPortSchema) }).meta({ id: 'PortList' });
export type PortList = z.infer<typeof PortListSchema>;
