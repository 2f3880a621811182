import { z } from 'zod';
import { InstantSchema, NameSchema } from './common.js';

export const TemplateStateSchema = z.enum(['building', 'ready', 'error']);

/** A template: a read-only root filesystem sandboxes start from, content-addressed by `id`. */
export const TemplateSchema = z
  .object({
    name: NameSchema,
    /** Content address: sha256 of the build recipe (parent id, packages, commands), hex. */
    id: z.string(),
    state: TemplateStateSchema,
    /** Parent template name, or null for a template built from Debian directly. */
    from: z.string().nullable(),
    apt: z.array(z.string()),
    run: z.array(z.string()),
    sizeBytes: z.number().int(),
    createdAt: InstantSchema,
    /** Why the build failed, when `state` is `error`. */
    error: z.string().nullable(),
  })
  .meta({ id: 'Template' });
export type Template = z.infer<typeof TemplateSchema>;

/** Debian package name (policy §5.6.1) with an optional `=version`. */
const AptPackageSchema = z.string().regex(/^[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+~:-]+)?$/, 'not a Debian package name');

/** Body of `POST /v1/templates`: build a template from another one plus apt packages and shell commands. */
export const BuildTemplateRequestSchema = z
  .object({
    name: NameSchema,
    /** Parent template. @default 'base' */
    from: NameSchema.default('base'),
    apt: z.array(AptPackageSchema).max(256).default([]),
    /** Shell commands run in order inside a gVisor sandbox (with network) on top of the parent. */
    run: z
      .array(
        z
          .string()
          .min(1)
          .max(16_384)
          .refine((c) => !c.includes('\0'), 'commands may not contain NUL bytes'),
      )
      .max(64)
      .default([]),
  })
  .strict()
  .meta({ id: 'BuildTemplateRequest' });
export type BuildTemplateRequest = z.input<typeof BuildTemplateRequestSchema>;

export const TemplateListSchema = z.object({ items: z.array(TemplateSchema) }).meta({ id: 'TemplateList' });
export const TemplateParamsSchema = z.object({ name: NameSchema });

/**
 * Progress of a template build, streamed as server-sent events by `POST /v1/templates` when the request
 * accepts `text/event-stream`: `log` lines, then one `done` (with the template) or `error`.
 */
export const TemplateBuildEventSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('log'), line: z.string() }),
  z.object({ type: z.literal('done'), template: TemplateSchema }),
  z.object({ type: z.literal('error'), code: z.string(), message: z.string() }),
]);
export type TemplateBuildEvent = z.infer<typeof TemplateBuildEventSchema>;
