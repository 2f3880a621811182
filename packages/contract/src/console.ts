import { z } from 'zod';
import { InstantSchema } from './common.js';
import { ApiKeyRoleSchema } from './keys.js';

/**
 * Body of `POST /v1/console/session`: sign the web console in with an API key. The answer sets the session cookie;
 * the key never reaches the page's script again.
 */
export const ConsoleSignInRequestSchema = z
  .object({ apiKey: z.string().min(1).max(512) })
  .strict()
  .meta({ id: 'ConsoleSignInRequest' });
export type ConsoleSignInRequest = z.infer<typeof ConsoleSignInRequestSchema>;

/** Who the console acts as: the signed-in key's id, tenant and role (never its secret). */
export const ConsoleSessionSchema = z
  .object({
    keyId: z.string(),
    tenantId: z.string(),
    role: ApiKeyRoleSchema,
  })
  .meta({ id: 'ConsoleSession' });
export type ConsoleSession = z.infer<typeof ConsoleSessionSchema>;

/** Answer of `POST /v1/console/login-links`: a one-time link that signs a browser in as the calling key. */
export const ConsoleLoginLinkSchema = z
  .object({
    /** Path and query to open on this server (`/console/login?token=…`); the caller prefixes the server's URL. */
    path: z.string(),
    /** After this instant (ISO-8601) the link no longer signs in; it works once. */
    expiresAt: InstantSchema,
  })
  .meta({ id: 'ConsoleLoginLink' });
export type ConsoleLoginLink = z.infer<typeof ConsoleLoginLinkSchema>;

/** Query of `GET /console/login`. */
export const ConsoleLoginQuerySchema = z.object({ token: z.string().min(1).max(128) });

/** One sample of a sandbox's resource use, taken by the server from the sandbox's cgroups and disk. */
export const MetricSampleSchema = z
  .object({
    /** When the sample was taken (ISO-8601). */
    at: InstantSchema,
    /** CPU used since the previous sample, in percent of one core (200 = two cores busy); null for the first. */
    cpuPercent: z.number().nullable(),
    /** Memory charged to the sandbox's cgroup, bytes. */
    memoryBytes: z.number().int(),
    /** Bytes the sandbox occupies on the host disk (allocated); null when not measured in this sample. */
    diskBytes: z.number().int().nullable(),
  })
  .meta({ id: 'MetricSample' });
export type MetricSample = z.infer<typeof MetricSampleSchema>;

/** Answer of `GET /v1/sandboxes/{id}/metrics`: the samples kept, oldest first. */
export const SandboxMetricsSchema = z
  .object({
    /** Milliseconds between samples. */
    intervalMs: z.number().int(),
    /** Longest span the server keeps, milliseconds; older samples are dropped. */
    windowMs: z.number().int(),
    /** Limits the samples are measured against. */
    limits: z.object({ cpuCount: z.number(), memoryMiB: z.number().int(), diskMiB: z.number().int() }),
    samples: z.array(MetricSampleSchema),
  })
  .meta({ id: 'SandboxMetrics' });
export type SandboxMetrics = z.infer<typeof SandboxMetricsSchema>;
