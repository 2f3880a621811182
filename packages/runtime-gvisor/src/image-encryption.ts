import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, open, readdir, readFile, rename, rm, stat, statfs, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CheckpointRejectedError, RuntimeError } from '@burrow/runtime';

/**
 * Encryption at rest of memory images (pause images, memory snapshots): AES-256-GCM, each file cut into chunks of
 * {@link CHUNK_BYTES} with their own nonce and tag, so a file is encrypted and decrypted streamed and a changed,
 * swapped, reordered or truncated chunk fails its tag. runsc reads and writes plaintext only, on a tmpfs (never at
 * rest on disk), removed as soon as the image is encrypted or restored.
 *
 * File layout: a {@link HEADER_BYTES}-byte header (magic, key id, chunk size, per-file nonce prefix), then per chunk
 * its ciphertext and 16-byte tag. Chunk `i`'s IV is the nonce prefix followed by `i` (32-bit big-endian); its
 * additional data is the header, the file's name and whether it is the last chunk.
 */

/** Format tag of an encrypted image, recorded in the manifest. */
export const IMAGE_CIPHER_FORMAT = 'burrow-image-aes-256-gcm/1';

const MAGIC = Buffer.from('BRWIMGE1');
/** Plaintext bytes per chunk. */
const CHUNK_BYTES = 1 << 20;
const TAG_BYTES = 16;
const KEY_ID_BYTES = 8;
const NONCE_PREFIX_BYTES = 8;
/** magic (8) + key id (8) + chunk bytes (4, BE) + reserved (4) + nonce prefix (8). */
const HEADER_BYTES = 32;
/** Filesystem magic numbers (statfs `f_type`) of tmpfs and ramfs: memory, never at rest on a disk. */
const MEMORY_FS_TYPES = new Set([0x01021994, 0x858458f6]);
/** The file runsc writes last and needs first; encrypted last, so its presence means the image is complete. */
const IMAGE_STATE_FILE = 'checkpoint.img';

/** The key images are encrypted with, and its id (recorded in each image and manifest; not secret). */
export interface ImageKey {
  /** 32 bytes. */
  key: Buffer;
  /** 16 hex: the first 8 bytes of SHA-256 over a label and the key. */
  keyId: string;
}

/** What a manifest records of an encrypted image. */
export interface ImageEncryptionInfo {
  format: typeof IMAGE_CIPHER_FORMAT;
  /** The {@link ImageKey.keyId} it was encrypted with. */
  keyId: string;
}

/** The {@link ImageKey} of 32 key bytes. @throws RangeError when `key` is not 32 bytes */
export function imageKey(key: Buffer): ImageKey {
  if (key.length !== 32) throw new RangeError(`an image key is 32 bytes, got ${key.length}`);
  const keyId = createHash('sha256').update('burrow-image-key-id\0').update(key).digest('hex').slice(0, 16);
  return { key, keyId };
}

/**
 * Read the image key from `keyFile`: 64 hex characters (32 bytes; `openssl rand -hex 32` makes one), surrounding
 * whitespace ignored. With `create`, a missing file is made first with a new random key, mode 0600.
 * @throws Error when the file is missing (without `create`), readable by group or others, or not 64 hex characters
 * @example
 * const key = await loadImageKey({ keyFile: '/var/lib/burrow/image-key', create: true });
 */
export async function loadImageKey(options: { keyFile: string; create?: boolean }): Promise<ImageKey> {
  const { keyFile } = options;
  if (options.create === true) {
    await writeFile(keyFile, `${randomBytes(32).toString('hex')}\n`, { mode: 0o600, flag: 'wx' }).catch(
      (error: NodeJS.ErrnoException) => {
        if (error.code !== 'EEXIST') throw error;
      },
    );
  }
  const st = await stat(keyFile).catch(() => null);
  if (st === null) throw new Error(`the image key file ${keyFile} does not exist`);
  if ((st.mode & 0o077) !== 0) {
    throw new Error(
      `the image key file ${keyFile} is readable by other users (mode ${(st.mode & 0o777).toString(8)}); chmod 600 it`,
    );
  }
  const text = (await readFile(keyFile, 'utf8')).trim();
  if (!/^[0-9a-fA-F]{64}$/.test(text)) {
    throw new Error(`the image key file ${keyFile} must hold 64 hex characters (32 bytes; openssl rand -hex 32)`);
  }
  return imageKey(Buffer.from(text, 'hex'));
}

/**
 * The encryption of `imageDir`'s image read from its `checkpoint.img` header, or null when it is plaintext (or the
 * file is missing).
 */
export async function imageEncryptionOf(imageDir: string): Promise<ImageEncryptionInfo | null> {
  const header = await readHeader(join(imageDir, IMAGE_STATE_FILE)).catch(() => null);
  return header === null ? null : { format: IMAGE_CIPHER_FORMAT, keyId: header.keyId };
}

/** An image in plaintext for runsc; `remove` deletes it when it is a staged copy (never the image it came from). */
export interface PlainImage {
  dir: string;
  remove(): Promise<void>;
}

/**
 * Encrypts images for the checkpointer and decrypts them for runsc, in private directories on a tmpfs.
 * @example
 * const images = new ImageEncryption({ key: await loadImageKey({ keyFile }), plainRoot: '/dev/shm/burrow-images' });
 */
export class ImageEncryption {
  readonly key: ImageKey;
  private readonly plainRoot: string;
  private readonly memoryCgroupOf: ((sandboxId: string) => string) | undefined;
  private readonly warn: (object: object, message: string) => void;
  private rootReady: Promise<void> | null = null;

  /**
   * @param options.plainRoot where plaintext images live while runsc writes or reads them: a directory on a tmpfs
   *   (made with mode 0700; refused if it is on another filesystem)
   * @param options.memoryCgroupOf the v1 memory cgroup directory of a sandbox, whose limit a checkpoint raises (see
   *   {@link checkpointInto}). @default none: limits are left alone
   */
  constructor(options: {
    key: ImageKey;
    plainRoot: string;
    memoryCgroupOf?: (sandboxId: string) => string;
    warn?: (object: object, message: string) => void;
  }) {
    this.key = options.key;
    this.plainRoot = options.plainRoot;
    this.memoryCgroupOf = options.memoryCgroupOf;
    this.warn = options.warn ?? (() => undefined);
  }

  /**
   * Run `checkpoint` (a `runsc checkpoint` of the held-still sandbox) into a new tmpfs directory, encrypt what it
   * wrote into `imageDir` ({@link seal}) and remove the plaintext. The sentry writes the image, so its tmpfs pages are
   * charged to the sandbox's memory cgroup: a sandbox using more than half its limit was OOM-killed in the middle of
   * its checkpoint. The limit is raised by the cgroup's usage (an upper bound of the image) for this step and set
   * back after the plaintext is gone; the sandbox is held still meanwhile, so it cannot use the headroom.
   */
  async checkpointInto(
    sandboxId: string,
    imageDir: string,
    checkpoint: (plainDir: string) => Promise<void>,
  ): Promise<void> {
    const plain = await this.stage(sandboxId);
    const cgroup = this.memoryCgroupOf?.(sandboxId);
    const lower = cgroup === undefined ? null : await raiseMemoryLimit(cgroup);
    try {
      await checkpoint(plain.dir);
      await this.seal(plain.dir, imageDir);
    } finally {
      await plain.remove();
      await lower?.().catch((error: unknown) =>
        this.warn({ sandboxId, err: error }, 'setting the memory limit back after an encrypted checkpoint failed'),
      );
    }
  }

  /** A new empty private directory on the tmpfs for a plaintext image of `sandboxId`. */
  async stage(sandboxId: string): Promise<PlainImage> {
    this.rootReady ??= this.prepareRoot().catch((error: unknown) => {
      this.rootReady = null;
      throw error;
    });
    await this.rootReady;
    const dir = await mkdtemp(join(this.plainRoot, `${sandboxId}-`));
    return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
  }

  /**
   * Encrypt every file of `plainDir` into `imageDir` (same names; `checkpoint.img` last, each through a temporary
   * name, so `checkpoint.img` appearing means the whole image is there).
   */
  async seal(plainDir: string, imageDir: string): Promise<void> {
    const names = (await readdir(plainDir)).sort(
      (a, b) => Number(a === IMAGE_STATE_FILE) - Number(b === IMAGE_STATE_FILE) || a.localeCompare(b),
    );
    await mkdir(imageDir, { recursive: true });
    for (const name of names) {
      const part = join(imageDir, `.${name}.part`);
      await encryptFile(this.key, name, join(plainDir, name), part);
      await rename(part, join(imageDir, name));
    }
  }

  /** Remove plaintext images of `sandboxId` a crash left on the tmpfs. */
  async clear(sandboxId: string): Promise<void> {
    for (const name of await readdir(this.plainRoot).catch(() => [] as string[])) {
      if (name.startsWith(`${sandboxId}-`)) await rm(join(this.plainRoot, name), { recursive: true, force: true });
    }
  }

  private async prepareRoot(): Promise<void> {
    await mkdir(this.plainRoot, { recursive: true, mode: 0o700 });
    await chmod(this.plainRoot, 0o700);
    const fs = await statfs(this.plainRoot);
    if (!MEMORY_FS_TYPES.has(Number(fs.type))) {
      throw new RuntimeError(
        `${this.plainRoot} is not on a tmpfs: plaintext memory images would be written to disk; give image ` +
          'encryption a directory on a tmpfs (such as /dev/shm)',
      );
    }
  }
}

/**
 * The image of `imageDir` in plaintext: `imageDir` itself when it is not encrypted, otherwise a copy decrypted into
 * a staged tmpfs directory (the caller removes it once runsc has read it).
 * @throws CheckpointRejectedError when the image is encrypted and `encryption` is absent or holds another key, or a
 *   chunk fails its authentication (altered or truncated)
 */
export async function openImage(
  encryption: ImageEncryption | undefined,
  imageDir: string,
  sandboxId: string,
): Promise<PlainImage> {
  const info = await imageEncryptionOf(imageDir);
  if (info === null) return { dir: imageDir, remove: async () => undefined };
  if (encryption === undefined) {
    throw new CheckpointRejectedError(
      `the memory image is encrypted (key id ${info.keyId}) and image encryption is off on this server; start it ` +
        'with the key the image was written with (BURROW_IMAGE_KEY_FILE)',
    );
  }
  if (info.keyId !== encryption.key.keyId) {
    throw new CheckpointRejectedError(
      `the memory image is encrypted with key id ${info.keyId}; this server's image key has id ` +
        `${encryption.key.keyId}. Start it with the key the image was written with (BURROW_IMAGE_KEY_FILE)`,
    );
  }
  const plain = await encryption.stage(sandboxId);
  try {
    for (const name of await readdir(imageDir)) {
      if (name.startsWith('.')) continue;
      await decryptFile(encryption.key, name, join(imageDir, name), join(plain.dir, name));
    }
    return plain;
  } catch (error) {
    await plain.remove();
    throw error;
  }
}

/** Values at or above this in a v1 `*.limit_in_bytes` mean no limit. */
const NO_LIMIT = 1n << 62n;

/**
 * Raise the memory (and memory+swap) limit of v1 memory cgroup `dir` by its current usage.
 * @returns the step that sets both back (limit first, then memory+swap, as the kernel requires), or null when the
 *   cgroup has no limit or does not exist
 */
async function raiseMemoryLimit(dir: string): Promise<(() => Promise<void>) | null> {
  const read = async (name: string) => {
    const text = await readFile(join(dir, name), 'utf8').catch(() => null);
    return text === null ? null : BigInt(text.trim());
  };
  const [limit, memsw, usage] = await Promise.all([
    read('memory.limit_in_bytes'),
    read('memory.memsw.limit_in_bytes'),
    read('memory.usage_in_bytes'),
  ]);
  if (limit === null || usage === null || limit >= NO_LIMIT) return null;
  const write = (name: string, value: bigint) => writeFile(join(dir, name), String(value));
  if (memsw !== null && memsw < NO_LIMIT) await write('memory.memsw.limit_in_bytes', memsw + usage);
  await write('memory.limit_in_bytes', limit + usage);
  return async () => {
    await write('memory.limit_in_bytes', limit);
    if (memsw !== null && memsw < NO_LIMIT) await write('memory.memsw.limit_in_bytes', memsw);
  };
}

interface Header {
  bytes: Buffer;
  keyId: string;
  chunkBytes: number;
  noncePrefix: Buffer;
}

async function readHeader(path: string): Promise<Header | null> {
  const handle = await open(path, 'r');
  try {
    const bytes = Buffer.alloc(HEADER_BYTES);
    const { bytesRead } = await handle.read(bytes, 0, HEADER_BYTES, 0);
    if (bytesRead < HEADER_BYTES || !bytes.subarray(0, MAGIC.length).equals(MAGIC)) return null;
    return {
      bytes,
      keyId: bytes.subarray(8, 8 + KEY_ID_BYTES).toString('hex'),
      chunkBytes: bytes.readUInt32BE(16),
      noncePrefix: bytes.subarray(24, 24 + NONCE_PREFIX_BYTES),
    };
  } finally {
    await handle.close();
  }
}

function chunkIv(noncePrefix: Buffer, index: number): Buffer {
  const iv = Buffer.alloc(12);
  noncePrefix.copy(iv, 0);
  iv.writeUInt32BE(index, 8);
  return iv;
}

function chunkAad(header: Buffer, name: string, last: boolean): Buffer {
  return Buffer.concat([header, Buffer.from(`\0${name}\0`), Buffer.from([last ? 1 : 0])]);
}

/** Encrypt `from` (a file named `name` in its image) into a new file `to`, streamed chunk by chunk. */
export async function encryptFile(key: ImageKey, name: string, from: string, to: string): Promise<void> {
  const header = Buffer.alloc(HEADER_BYTES);
  MAGIC.copy(header, 0);
  Buffer.from(key.keyId, 'hex').copy(header, 8);
  header.writeUInt32BE(CHUNK_BYTES, 16);
  const noncePrefix = randomBytes(NONCE_PREFIX_BYTES);
  noncePrefix.copy(header, 24);
  const input = await open(from, 'r');
  const output = await open(to, 'wx', 0o600);
  try {
    const size = (await input.stat()).size;
    const chunks = Math.max(1, Math.ceil(size / CHUNK_BYTES));
    if (chunks > 0xffffffff) throw new RuntimeError(`image file ${name} is too large to encrypt`);
    await output.write(header, 0, HEADER_BYTES, 0);
    const plain = Buffer.alloc(CHUNK_BYTES);
    let at = HEADER_BYTES;
    for (let index = 0; index < chunks; index++) {
      const want = Math.min(CHUNK_BYTES, size - index * CHUNK_BYTES);
      const { bytesRead } = await input.read(plain, 0, want, index * CHUNK_BYTES);
      if (bytesRead !== want) throw new RuntimeError(`image file ${name} changed while it was encrypted`);
      const cipher = createCipheriv('aes-256-gcm', key.key, chunkIv(noncePrefix, index));
      cipher.setAAD(chunkAad(header, name, index === chunks - 1));
      const sealed = Buffer.concat([cipher.update(plain.subarray(0, want)), cipher.final(), cipher.getAuthTag()]);
      await output.write(sealed, 0, sealed.length, at);
      at += sealed.length;
    }
  } finally {
    await Promise.all([input.close(), output.close()]);
  }
}

/**
 * Decrypt `from` (a file named `name` in its image) into a new file `to`, each chunk authenticated before it is
 * written. @throws CheckpointRejectedError when the file is not an image of this key, or altered or truncated
 */
export async function decryptFile(key: ImageKey, name: string, from: string, to: string): Promise<void> {
  const header = await readHeader(from);
  if (header === null) throw new CheckpointRejectedError(`image file ${name} is not encrypted (altered)`);
  if (header.keyId !== key.keyId) {
    throw new CheckpointRejectedError(`image file ${name} is encrypted with key id ${header.keyId}, not ${key.keyId}`);
  }
  if (header.chunkBytes < 1 || header.chunkBytes > 64 * CHUNK_BYTES) {
    throw new CheckpointRejectedError(`image file ${name} has a bad header (altered)`);
  }
  const input = await open(from, 'r');
  const output = await open(to, 'wx', 0o600);
  try {
    const payload = (await input.stat()).size - HEADER_BYTES;
    const sealedChunk = header.chunkBytes + TAG_BYTES;
    const chunks = Math.max(1, Math.ceil(payload / sealedChunk));
    const sealed = Buffer.alloc(sealedChunk);
    for (let index = 0; index < chunks; index++) {
      const want = Math.min(sealedChunk, payload - index * sealedChunk);
      if (want < TAG_BYTES) throw new CheckpointRejectedError(`image file ${name} is truncated (altered)`);
      const { bytesRead } = await input.read(sealed, 0, want, HEADER_BYTES + index * sealedChunk);
      if (bytesRead !== want) throw new CheckpointRejectedError(`image file ${name} is truncated (altered)`);
      const decipher = createDecipheriv('aes-256-gcm', key.key, chunkIv(header.noncePrefix, index));
      decipher.setAAD(chunkAad(header.bytes, name, index === chunks - 1));
      decipher.setAuthTag(sealed.subarray(want - TAG_BYTES, want));
      let plain: Buffer;
      try {
        plain = Buffer.concat([decipher.update(sealed.subarray(0, want - TAG_BYTES)), decipher.final()]);
      } catch {
        throw new CheckpointRejectedError(`image file ${name} fails its authentication at chunk ${index} (altered)`);
      }
      await output.write(plain, 0, plain.length, index * header.chunkBytes);
    }
  } finally {
    await Promise.all([input.close(), output.close()]);
  }
}
