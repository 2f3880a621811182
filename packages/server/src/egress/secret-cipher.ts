import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { readFile, stat, writeFile } from 'node:fs/promises';

/** Prefix of a sealed secret value: `secret:v1:` + base64(IV ‖ GCM tag ‖ ciphertext). */
const SEALED_PREFIX = 'secret:v1:';
const IV_BYTES = 12;
const TAG_BYTES = 16;

/**
 * Secret values at rest: AES-256-GCM under one key of the installation (`<data-dir>/secret-key`, 32 random bytes as
 * 64 hex characters, mode 0600). The tenant and name are authenticated with each value, so a sealed value copied to
 * another row does not open there.
 */
export class SecretCipher {
  private constructor(private readonly key: Buffer) {}

  /**
   * Read the key file, making it (0600) when it does not exist.
   * @throws Error when the file is readable by group or others, or does not hold 64 hex characters
   */
  static async load(keyFile: string): Promise<SecretCipher> {
    await writeFile(keyFile, `${randomBytes(32).toString('hex')}\n`, { mode: 0o600, flag: 'wx' }).catch(
      (error: NodeJS.ErrnoException) => {
        if (error.code !== 'EEXIST') throw error;
      },
    );
    const st = await stat(keyFile);
    if ((st.mode & 0o077) !== 0) {
      throw new Error(`the secret key file ${keyFile} is readable by other users; chmod 600 it`);
    }
    const text = (await readFile(keyFile, 'utf8')).trim();
    if (!/^[0-9a-fA-F]{64}$/.test(text)) throw new Error(`the secret key file ${keyFile} must hold 64 hex characters`);
    return new SecretCipher(Buffer.from(text, 'hex'));
  }

  /** The stored form of `value`, bound to `tenantId` and `name`. */
  seal(tenantId: string, name: string, value: string): string {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv);
    cipher.setAAD(Buffer.from(`${tenantId}\0${name}`));
    const body = Buffer.concat([cipher.update(value, 'utf8'), cipher.final()]);
    return SEALED_PREFIX + Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64');
  }

  /**
   * The value of a stored form.
   * @throws Error when it was sealed under another key, tenant or name, or was altered
   */
  open(tenantId: string, name: string, sealed: string): string {
    if (!sealed.startsWith(SEALED_PREFIX)) throw new Error('not a sealed secret value');
    const bytes = Buffer.from(sealed.slice(SEALED_PREFIX.length), 'base64');
    const decipher = createDecipheriv('aes-256-gcm', this.key, bytes.subarray(0, IV_BYTES));
    decipher.setAAD(Buffer.from(`${tenantId}\0${name}`));
    decipher.setAuthTag(bytes.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
    return Buffer.concat([decipher.update(bytes.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]).toString('utf8');
  }
}
