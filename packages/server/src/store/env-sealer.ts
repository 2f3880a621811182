import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';

/** Prefix of a sealed env column: `sealed:v1:` + base64(IV ‖ GCM tag ‖ ciphertext of the env JSON). */
const SEALED_PREFIX = 'sealed:v1:';
const KEY_BYTES = 32;
const IV_BYTES = 12;
const TAG_BYTES = 16;
/** Owner ids are `sbx_…` or `snp_…`: they become file names. */
const OWNER_ID = /^[a-z]{3}_[A-Za-z0-9]{1,64}$/;

/**
 * Env values at rest: each owner (a sandbox, or a snapshot's copy of its settings) has its own AES-256-GCM key in a
 * file of its own (`<dir>/<ownerId>.key`, mode 0600), and the database holds only ciphertext. Destroying the key
 * (on delete) makes every copy of that ciphertext unreadable wherever the database keeps it: SQLite free pages and
 * WAL frames, PostgreSQL dead tuples and WAL segments, backups. Keys are read once and kept in memory.
 * Synchronous on purpose: a key is 32 bytes read or written once per owner, and row decoding is synchronous.
 */
export class EnvSealer {
  private readonly keys = new Map<string, Buffer>();

  /** @param dir where the key files live (created 0700 if missing) */
  constructor(private readonly dir: string) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  }

  /** The column value for `env` of `ownerId` (its key is made on first use). */
  seal(ownerId: string, env: Record<string, string>): string {
    const key = this.key(ownerId, true) as Buffer;
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', key, iv);
    const body = Buffer.concat([cipher.update(JSON.stringify(env), 'utf8'), cipher.final()]);
    return SEALED_PREFIX + Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64');
  }

  /**
   * The env of a column value. A plain JSON object (rows written without a sealer) is read as it is; a sealed value
   * whose key is gone (its owner was deleted) reads as `{}`.
   */
  open(ownerId: string, stored: string): Record<string, string> {
    return openEnv(stored, () => this.key(ownerId, false));
  }

  /** Overwrite and remove `ownerId`'s key: what was sealed with it cannot be read again. Idempotent. */
  destroy(ownerId: string): void {
    this.keys.delete(ownerId);
    const path = this.path(ownerId);
    let fd: number;
    try {
      fd = openSync(path, 'r+');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw error;
    }
    try {
      // Zeros over the key before the unlink, so the blocks the file leaves behind do not hold it.
      writeSync(fd, Buffer.alloc(KEY_BYTES), 0, KEY_BYTES, 0);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    rmSync(path, { force: true });
  }

  /**
   * Destroy the keys of owners that are gone (a crash between a row's removal and its key's destruction).
   * @param live whether an owner id still has a row
   * @returns the owner ids whose keys were destroyed
   */
  async sweep(live: (ownerId: string) => Promise<boolean>): Promise<string[]> {
    const gone: string[] = [];
    for (const name of readdirSync(this.dir)) {
      const ownerId = name.endsWith('.key') ? name.slice(0, -'.key'.length) : '';
      if (!OWNER_ID.test(ownerId) || (await live(ownerId))) continue;
      this.destroy(ownerId);
      gone.push(ownerId);
    }
    return gone;
  }

  /** Whether `ownerId` has a key (for tests and the reconciler). */
  hasKey(ownerId: string): boolean {
    return this.key(ownerId, false) !== null;
  }

  private path(ownerId: string): string {
    if (!OWNER_ID.test(ownerId)) throw new Error(`not an owner id: ${ownerId}`);
    return join(this.dir, `${ownerId}.key`);
  }

  private key(ownerId: string, create: boolean): Buffer | null {
    const cached = this.keys.get(ownerId);
    if (cached !== undefined) return cached;
    const path = this.path(ownerId);
    try {
      const key = readFileSync(path);
      if (key.length === KEY_BYTES) {
        this.keys.set(ownerId, key);
        return key;
      }
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
    if (!create) return null;
    const key = randomBytes(KEY_BYTES);
    const fd = openSync(path, 'w', 0o600);
    try {
      writeSync(fd, key);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    this.keys.set(ownerId, key);
    return key;
  }
}

/** {@link EnvSealer.open} with the key from `keyOf` (null: no key). */
function openEnv(stored: string, keyOf: () => Buffer | null): Record<string, string> {
  if (!stored.startsWith(SEALED_PREFIX)) return JSON.parse(stored) as Record<string, string>;
  const key = keyOf();
  if (key === null) return {};
  const raw = Buffer.from(stored.slice(SEALED_PREFIX.length), 'base64');
  const decipher = createDecipheriv('aes-256-gcm', key, raw.subarray(0, IV_BYTES));
  decipher.setAuthTag(raw.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
  const plain = Buffer.concat([decipher.update(raw.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]);
  return JSON.parse(plain.toString('utf8')) as Record<string, string>;
}

/** Env columns without sealing (stores built without an {@link EnvSealer}: plain JSON, as read back). */
export const PLAIN_ENV = {
  seal: (_ownerId: string, env: Record<string, string>): string => JSON.stringify(env),
  open: (_ownerId: string, stored: string): Record<string, string> => openEnv(stored, () => null),
  destroy: (_ownerId: string): void => undefined,
};

/** What the stores need of an {@link EnvSealer}. */
export type EnvCodec = Pick<EnvSealer, 'seal' | 'open' | 'destroy'>;
