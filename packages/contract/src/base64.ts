import { z } from 'zod';

const STANDARD_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
/** The 6-bit value of each ASCII character of the standard alphabet, -1 for every other character. */
const SEXTET = new Int8Array(128).fill(-1);
for (let i = 0; i < STANDARD_ALPHABET.length; i++) SEXTET[STANDARD_ALPHABET.charCodeAt(i)] = i;
const EQUALS = 0x3d;

/**
 * The base64 rule of every request field that carries bytes (exec `stdin`, a command's stdin `data`, a batch file's
 * `content` with `encoding: 'base64'`): standard base64 (RFC 4648 §4: `A-Z a-z 0-9 + /`), padded with `=` or
 * unpadded. Refused: whitespace and line breaks, the URL-safe `-` and `_`, any other character, `=` anywhere but as
 * the final padding, padding that does not complete the last group of 4, a length that is 1 more than a multiple of
 * 4, and a last character whose bits beyond the last byte are not zero. What passes therefore decodes to exactly
 * the bytes it spells, and is what `Buffer#toString('base64')` or `btoa()` writes for them (padding optional).
 * A loop rather than a regular expression: V8 runs out of stack on a grouped pattern over a ~14 MB string.
 * @param text the field's value
 * @returns whether `text` follows the rule
 * @example
 * isStandardBase64('aGk='); // true
 * isStandardBase64('aGk'); // true
 * isStandardBase64('aG k='); // false
 */
export function isStandardBase64(text: string): boolean {
  let end = text.length;
  if (end > 0 && text.charCodeAt(end - 1) === EQUALS) end--;
  if (end > 0 && text.charCodeAt(end - 1) === EQUALS) end--;
  const tail = end % 4;
  if (tail === 1) return false;
  const padding = text.length - end;
  if (padding > 0 && padding !== 4 - tail) return false;
  for (let i = 0; i < end; i++) {
    const code = text.charCodeAt(i);
    if (code >= 128 || (SEXTET[code] ?? -1) < 0) return false;
  }
  if (tail === 0) return true;
  const last = SEXTET[text.charCodeAt(end - 1)] ?? -1;
  return (last & (tail === 2 ? 0x0f : 0x03)) === 0;
}

/** What to do when a field breaks {@link isStandardBase64}'s rule; the error names the field before it. */
export const BASE64_RULE_MESSAGE =
  "must be standard base64 (A-Z a-z 0-9 + /, = only as final padding, no whitespace or URL-safe - _), as Buffer#toString('base64') or btoa() writes it";

/**
 * The same rule as a regular expression, for the OpenAPI document and clients that validate with it. The server
 * checks with {@link isStandardBase64}, which gives the same answer.
 */
export const STANDARD_BASE64_PATTERN =
  /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw](?:==)?|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=?)?$/;

/**
 * A request field of bytes as base64, under {@link isStandardBase64}'s rule (padded or unpadded standard base64,
 * nothing else). Chain `.max()` for a size limit.
 * @example
 * const StdinSchema = Base64Schema.max(14_000_000).optional();
 */
export const Base64Schema = z
  .string()
  .refine(isStandardBase64, { message: BASE64_RULE_MESSAGE })
  .meta({ format: 'base64', contentEncoding: 'base64', pattern: STANDARD_BASE64_PATTERN.source });
