import { z } from 'zod';

/** Alphabet of generated ids: lowercase Crockford base32 (no i, l, o, u). */
export const ID_ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';
/** Length of the random part of every id. Fixed so that no id is a prefix of another (runsc prefix-matches ids). */
export const ID_RANDOM_LENGTH = 20;

const idPattern = (prefix: string) => new RegExp(`^${prefix}_[${ID_ALPHABET}]{${ID_RANDOM_LENGTH}}$`);

/** `sbx_` + 20 base32 characters. */
export const SandboxIdSchema = z
  .string()
  .regex(idPattern('sbx'), 'must look like sbx_ followed by 20 base32 characters');
/** `key_` + 20 base32 characters. */
export const ApiKeyIdSchema = z
  .string()
  .regex(idPattern('key'), 'must look like key_ followed by 20 base32 characters');

/** ISO-8601 UTC instant, for example `2026-11-29T08:00:00.000Z`. */
export const InstantSchema = z.iso.datetime();

/** Name of a template or tenant: lowercase letters, digits and dashes, 1–63 characters, starting with a letter or digit. */
export const NameSchema = z
  .string()
  .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, 'use 1-63 lowercase letters, digits or dashes, starting with a letter or digit');

/** Labels: up to 32 key/value string pairs; keys `[a-zA-Z0-9._/-]{1,63}`, values up to 256 characters. */
export const LabelsSchema = z
  .record(
    z.string().regex(/^[a-zA-Z0-9._/-]{1,63}$/, 'label keys use 1-63 of a-z A-Z 0-9 . _ / -'),
    z
      .string()
      .max(256)
      .refine((v) => !v.includes('\0'), 'label values may not contain NUL bytes'),
  )
  .refine((l) => Object.keys(l).length <= 32, 'at most 32 labels');

/** Environment variables: names `[A-Za-z_][A-Za-z0-9_]*`, values without NUL bytes; at most 256 entries. */
export const EnvSchema = z
  .record(
    z
      .string()
      .regex(/^[A-Za-z_][A-Za-z0-9_]{0,255}$/, 'env names use letters, digits and _ and do not start with a digit'),
    z
      .string()
      .max(32_768)
      .refine((v) => !v.includes('\0'), 'env values may not contain NUL bytes'),
  )
  .refine((e) => Object.keys(e).length <= 256, 'at most 256 env variables');

/** An absolute path inside a sandbox: starts with `/`, no NUL bytes, at most 4096 bytes. */
export const SandboxPathSchema = z
  .string()
  .min(1)
  .max(4096)
  .refine((p) => p.startsWith('/'), 'paths are absolute inside the sandbox: start with /')
  .refine((p) => !p.includes('\0'), 'paths may not contain NUL bytes');

/** Cursor pagination query. `limit` 1–200, default 50. */
export const PageQuerySchema = z.object({
  limit: z.coerce.number().int().min(1).max(200).default(50),
  cursor: z.string().max(512).optional(),
});
