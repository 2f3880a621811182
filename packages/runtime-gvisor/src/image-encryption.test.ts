import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, open, readdir, readFile, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CheckpointRejectedError } from '@burrow/runtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  decryptFile,
  encryptFile,
  ImageEncryption,
  imageEncryptionOf,
  imageKey,
  loadImageKey,
  openImage,
} from './image-encryption.js';

describe('image encryption (files on a tmpdir, no runsc)', () => {
  let dir: string;
  const key = imageKey(randomBytes(32));
  const otherKey = imageKey(randomBytes(32));
  const plainRoot = () => join('/dev/shm', `burrow-image-test-${process.pid}`);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'burrow-image-encryption-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
    await rm(plainRoot(), { recursive: true, force: true });
  });

  /** A file of `sizeBytes` with a marker at its start, middle and end. */
  const sample = async (name: string, sizeBytes: number): Promise<Buffer> => {
    const bytes = randomBytes(sizeBytes);
    for (const at of [0, Math.floor(sizeBytes / 2), sizeBytes - 12]) {
      if (at >= 0 && sizeBytes >= 12) bytes.write('SECRET-MARK!', at);
    }
    await writeFile(join(dir, name), bytes);
    return bytes;
  };

  it('round-trips files of 0 bytes, one chunk and several chunks, and leaves no plaintext marker', async () => {
    for (const size of [0, 5, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 77]) {
      const bytes = await sample(`plain-${size}`, size);
      await encryptFile(key, 'pages.img', join(dir, `plain-${size}`), join(dir, `enc-${size}`));
      const sealed = await readFile(join(dir, `enc-${size}`));
      expect(sealed.includes('SECRET-MARK!')).toBe(false);
      await decryptFile(key, 'pages.img', join(dir, `enc-${size}`), join(dir, `dec-${size}`));
      expect((await readFile(join(dir, `dec-${size}`))).equals(bytes)).toBe(true);
    }
  });

  it('refuses another key, a changed byte, a truncated file and a file renamed to another image file', async () => {
    await sample('p', 2 * (1 << 20) + 10);
    await encryptFile(key, 'pages.img', join(dir, 'p'), join(dir, 'e'));
    const fresh = async () => rm(join(dir, 'out'), { force: true });
    await fresh();
    await expect(decryptFile(otherKey, 'pages.img', join(dir, 'e'), join(dir, 'out'))).rejects.toThrow(
      /encrypted with key id [0-9a-f]{16}, not/,
    );
    await fresh();
    await expect(decryptFile(key, 'checkpoint.img', join(dir, 'e'), join(dir, 'out'))).rejects.toThrow(
      /fails its authentication at chunk 0/,
    );
    const handle = await open(join(dir, 'e'), 'r+');
    await handle.write(Buffer.from([0x55]), 0, 1, 32 + (1 << 20) + 16 + 100);
    await handle.close();
    await fresh();
    await expect(decryptFile(key, 'pages.img', join(dir, 'e'), join(dir, 'out'))).rejects.toBeInstanceOf(
      CheckpointRejectedError,
    );
    await encryptFile(key, 'pages.img', join(dir, 'p'), join(dir, 'e2'));
    // Cut at a chunk boundary: the chunk now last was sealed as not last.
    await truncate(join(dir, 'e2'), 32 + 2 * ((1 << 20) + 16));
    await fresh();
    await expect(decryptFile(key, 'pages.img', join(dir, 'e2'), join(dir, 'out'))).rejects.toThrow(
      /fails its authentication at chunk 1/,
    );
  });

  it('seals a directory (checkpoint.img last) and opens it into a private tmpfs dir, removed after', async () => {
    const encryption = new ImageEncryption({ key, plainRoot: plainRoot() });
    const staged = await encryption.stage('sbx_a');
    await writeFile(join(staged.dir, 'checkpoint.img'), 'state SECRET-MARK!');
    await writeFile(join(staged.dir, 'pages.img'), randomBytes(3000));
    const imageDir = join(dir, 'image');
    await encryption.seal(staged.dir, imageDir);
    await staged.remove();
    expect((await readdir(imageDir)).sort()).toEqual(['checkpoint.img', 'pages.img']);
    expect(await imageEncryptionOf(imageDir)).toEqual({ format: 'burrow-image-aes-256-gcm/1', keyId: key.keyId });
    expect((await stat(plainRoot())).mode & 0o777).toBe(0o700);

    const plain = await openImage(encryption, imageDir, 'sbx_a');
    expect(plain.dir.startsWith(`${plainRoot()}/sbx_a-`)).toBe(true);
    expect(await readFile(join(plain.dir, 'checkpoint.img'), 'utf8')).toBe('state SECRET-MARK!');
    await plain.remove();
    expect(await readdir(plainRoot())).toEqual([]);

    await expect(openImage(undefined, imageDir, 'sbx_a')).rejects.toThrow(/image encryption is off on this server/);
    const wrong = new ImageEncryption({ key: otherKey, plainRoot: plainRoot() });
    await expect(openImage(wrong, imageDir, 'sbx_a')).rejects.toThrow(
      new RegExp(`encrypted with key id ${key.keyId}; this server's image key has id ${otherKey.keyId}`),
    );
    // A plaintext image is used where it is.
    const plainDir = join(dir, 'plain-image');
    await mkdir(plainDir);
    await writeFile(join(plainDir, 'checkpoint.img'), 'x');
    expect((await openImage(encryption, plainDir, 'sbx_a')).dir).toBe(plainDir);
  });

  it('refuses a staging dir that is not on a tmpfs', async () => {
    const encryption = new ImageEncryption({ key, plainRoot: join(dir, 'not-tmpfs') });
    await expect(encryption.stage('sbx_a')).rejects.toThrow(/is not on a tmpfs/);
  });

  it('makes a key file once (mode 0600), reads it back, refuses a readable or malformed one', async () => {
    const keyFile = join(dir, 'image-key');
    const made = await loadImageKey({ keyFile, create: true });
    expect((await stat(keyFile)).mode & 0o777).toBe(0o600);
    expect((await loadImageKey({ keyFile, create: true })).keyId).toBe(made.keyId);
    expect((await loadImageKey({ keyFile })).key.equals(made.key)).toBe(true);
    await expect(loadImageKey({ keyFile: join(dir, 'none') })).rejects.toThrow(/does not exist/);
    await writeFile(join(dir, 'bad-key'), 'abc\n', { mode: 0o600 });
    await expect(loadImageKey({ keyFile: join(dir, 'bad-key') })).rejects.toThrow(/64 hex characters/);
    await writeFile(join(dir, 'open-key'), `${'ab'.repeat(32)}\n`, { mode: 0o644 });
    await expect(loadImageKey({ keyFile: join(dir, 'open-key') })).rejects.toThrow(/chmod 600/);
  });
});
