import { randomBytes } from 'node:crypto';
import { ID_ALPHABET, ID_RANDOM_LENGTH } from '@burrow/contract';

/** `length` random characters of the lowercase Crockford base32 alphabet. */
export function randomBase32(length: number): string {
  const bytes = randomBytes(length);
  let out = '';
  for (const b of bytes) out += ID_ALPHABET[b & 31];
  return out;
}

/** A new id: `prefix` + `_` + 20 random base32 characters, for example `sbx_…`. */
export function newId(prefix: 'sbx' | 'key' | 'req' | 'cmd' | 'snp' | 'whk' | 'dlv' | 'bkt' | 'vol'): string {
  return `${prefix}_${randomBase32(ID_RANDOM_LENGTH)}`;
}
