import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';

/** What {@link PreviewAccess.verifySignature} finds. */
export type SignatureCheck = 'ok' | 'expired' | 'invalid';

/**
 * Access tokens and signed URLs of preview URLs, from one secret of the installation (`<dataDir>/preview-secret`,
 * 32 random bytes, mode 0600). A sandbox's access token and a signature are HMAC-SHA256 of what they grant, so
 * nothing about them is stored, and a signature is bound to one sandbox, one port and its expiry.
 */
export class PreviewAccess {
  private constructor(private readonly key: Buffer) {}

  /**
   * The secret at `path`, made on first use.
   * @throws Error when the file cannot be read or written
   */
  static async load(path: string): Promise<PreviewAccess> {
    let secret = (await readFile(path, 'utf8').catch(() => '')).trim();
    if (!/^[0-9a-f]{64}$/.test(secret)) {
      secret = randomBytes(32).toString('hex');
      await writeFile(path, `${secret}\n`, { mode: 0o600 });
    }
    return new PreviewAccess(Buffer.from(secret, 'hex'));
  }

  /** The access token of sandbox `sandboxId` (`bpt_` + 43 base64url characters), the same on every call. */
  accessToken(sandboxId: string): string {
    return `bpt_${this.mac(`access\0${sandboxId}`)}`;
  }

  /** Whether `token` is the access token of `sandboxId` (constant time). */
  checkToken(sandboxId: string, token: string): boolean {
    return safeEqual(token, this.accessToken(sandboxId));
  }

  /** The signature of a signed URL: `<expiresAtMs>.<mac>`. */
  sign(sandboxId: string, port: number, expiresAtMs: number): string {
    return `${expiresAtMs}.${this.mac(`signed\0${sandboxId}\0${port}\0${expiresAtMs}`)}`;
  }

  /** Whether `value` (from a signed URL or its cookie) grants `port` of `sandboxId` at `nowMs`. */
  verifySignature(sandboxId: string, port: number, value: string, nowMs: number): SignatureCheck {
    const match = /^(\d{1,15})\.([A-Za-z0-9_-]{43})$/.exec(value);
    if (match?.[1] === undefined) return 'invalid';
    const expiresAtMs = Number(match[1]);
    if (!safeEqual(value, this.sign(sandboxId, port, expiresAtMs))) return 'invalid';
    return expiresAtMs <= nowMs ? 'expired' : 'ok';
  }

  private mac(text: string): string {
    return createHmac('sha256', this.key).update(text).digest('base64url');
  }
}

function safeEqual(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}
