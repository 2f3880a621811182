import { z } from 'zod';
import { InstantSchema } from './common.js';
import { parseNetworkRule } from './network-rules.js';

/** Largest secret value, bytes of UTF-8. */
export const MAX_SECRET_VALUE_BYTES = 65_536;
/** Most hosts one secret is bound to. */
export const MAX_SECRET_HOSTS = 32;
/** Most secrets one sandbox is created with. */
export const MAX_SANDBOX_SECRETS = 32;
/** What every placeholder starts with: `burrow-secret-` and 32 hex characters. */
export const SECRET_PLACEHOLDER_PREFIX = 'burrow-secret-';

/** A secret's name: letters, digits and `_`, not starting with a digit, 1–64 characters (an env name's shape). */
export const SecretNameSchema = z
  .string()
  .regex(/^[A-Za-z_][A-Za-z0-9_]{0,63}$/, 'secret names use 1-64 letters, digits and _ and do not start with a digit');

/** A host a secret is bound to: a domain (`api.example.com`) or a wildcard (`*.example.com`); no addresses. */
export const SecretHostSchema = z
  .string()
  .max(260)
  .superRefine((entry, ctx) => {
    const parsed = parseNetworkRule(entry);
    if (!parsed.ok) ctx.addIssue({ code: 'custom', message: parsed.message.replace('network rule', 'secret host') });
    else if (parsed.rule.type === 'cidr') {
      ctx.addIssue({
        code: 'custom',
        message: `secret host "${entry}" is an address; bind secrets to names (api.example.com, *.example.com)`,
      });
    }
  });

const HEADER_TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$/;
/** Headers the proxy owns: a secret may not be put in them. */
const RESERVED_HEADERS = new Set([
  'host',
  'connection',
  'content-length',
  'transfer-encoding',
  'upgrade',
  'te',
  'trailer',
  'keep-alive',
  'proxy-connection',
]);
const NO_LINE_BREAKS = (v: string) => !/[\r\n\0]/.test(v);

/** Body of `PUT /v1/secrets/{name}`: creates the secret or replaces it whole. */
export const SetSecretRequestSchema = z
  .object({
    /** The value, at most 64 KiB of UTF-8, without CR, LF or NUL (it goes into HTTP headers). Never returned. */
    value: z.string().min(1).refine(NO_LINE_BREAKS, 'secret values may not contain CR, LF or NUL'),
    /** Hosts whose requests get the value (1–32 domains or wildcards); every other host gets the placeholder. */
    hosts: z.array(SecretHostSchema).min(1).max(MAX_SECRET_HOSTS),
    /**
     * A header the proxy sets on every request to a bound host to `format` with `{value}` replaced (whatever the
     * sandbox sent in it). Left out: the placeholder is replaced wherever it stands in the request line and headers.
     */
    header: z
      .string()
      .regex(HEADER_TOKEN, 'header names are HTTP tokens of 1-64 characters')
      .refine((h) => !RESERVED_HEADERS.has(h.toLowerCase()), 'this header is the proxy’s own; name another')
      .optional(),
    /** With `header`: its value, `{value}` standing for the secret. @default '{value}' */
    format: z
      .string()
      .max(1024)
      .refine((f) => f.includes('{value}'), 'format must contain {value}')
      .refine(NO_LINE_BREAKS, 'format may not contain CR, LF or NUL')
      .optional(),
  })
  .strict()
  .refine((r) => r.format === undefined || r.header !== undefined, {
    message: 'format needs header: name the header the formatted value goes into',
    path: ['format'],
  })
  .meta({ id: 'SetSecretRequest' });
export type SetSecretRequest = z.input<typeof SetSecretRequestSchema>;

/** Body of `POST /v1/secrets/{name}/rotate`: a new value, used from the next request on. */
export const RotateSecretRequestSchema = z
  .object({ value: SetSecretRequestSchema.shape.value })
  .strict()
  .meta({ id: 'RotateSecretRequest' });
export type RotateSecretRequest = z.input<typeof RotateSecretRequestSchema>;

/** A secret as the API shows it: never its value. */
export const SecretSchema = z
  .object({
    name: SecretNameSchema,
    hosts: z.array(z.string()),
    /** The header the value is put into, or null: the placeholder is replaced where it stands. */
    header: z.string().nullable(),
    /** With `header`: the header's value, `{value}` standing for the secret; else null. */
    format: z.string().nullable(),
    createdAt: InstantSchema,
    /** When the value was last replaced (`rotate` or `set` again), or null. */
    rotatedAt: InstantSchema.nullable(),
  })
  .meta({ id: 'Secret' });
export type Secret = z.infer<typeof SecretSchema>;

export const SecretListSchema = z.object({ items: z.array(SecretSchema) }).meta({ id: 'SecretList' });
export type SecretList = z.infer<typeof SecretListSchema>;
export const SecretParamsSchema = z.object({ name: SecretNameSchema });

/**
 * A secret a sandbox is created with: its name (the env var gets the same name), or `{ name, env }` to name the
 * env var. The sandbox sees `burrow-secret-<32 hex>` in it; requests to the secret's hosts carry the value.
 */
export const SandboxSecretRequestSchema = z.union([
  SecretNameSchema,
  z
    .object({
      name: SecretNameSchema,
      /** The env var holding the placeholder. @default the secret's name */
      env: z
        .string()
        .regex(/^[A-Za-z_][A-Za-z0-9_]{0,255}$/, 'env names use letters, digits and _ and do not start with a digit')
        .optional(),
    })
    .strict(),
]);
export type SandboxSecretRequest = z.input<typeof SandboxSecretRequestSchema>;

/** The `secrets` field of a create request: at most 32, each env var once. */
export const SandboxSecretsRequestSchema = z
  .array(SandboxSecretRequestSchema)
  .max(MAX_SANDBOX_SECRETS)
  .superRefine((entries, ctx) => {
    const envs = new Set<string>();
    for (const [index, entry] of entries.entries()) {
      const env = typeof entry === 'string' ? entry : (entry.env ?? entry.name);
      if (envs.has(env)) ctx.addIssue({ code: 'custom', path: [index], message: `env var ${env} is named twice` });
      envs.add(env);
    }
  });
