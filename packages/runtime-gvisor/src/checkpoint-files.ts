import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open, readdir, readFile, rename, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CheckpointRejectedError } from '@burrow/runtime';
import { mustRun } from './host-plumbing.js';
import { type ImageEncryptionInfo, imageEncryptionOf } from './image-encryption.js';
import { runCommand } from './run-command.js';

/** Format tag of {@link CheckpointManifest}; a manifest with another tag is refused. */
export const MANIFEST_FORMAT = 'burrow-checkpoint/1';

/** One checksummed file. */
export interface ManifestFile {
  name: string;
  sizeBytes: number;
  /** SHA-256 (hex) of the content; `''` while the manifest's {@link CheckpointManifest.checksumsPending} is set. */
  sha256: string;
  /**
   * Identity of the file on this host when the manifest was sealed (absent in manifests sealed without fingerprints).
   * A resume of a local pause image whose every file still has it skips re-hashing; see {@link verifyState}.
   */
  fingerprint?: FileFingerprint;
}

/**
 * Inode, size, mtime and ctime (ns, decimal strings) of a file. Every write or truncate changes mtime and ctime, and
 * ctime cannot be set back from user space (utimes sets it to now), so an unchanged fingerprint means the file was
 * not written since it was taken (to the kernel's timestamp granularity of a few ms) and is the same inode.
 */
export interface FileFingerprint {
  ino: string;
  sizeBytes: number;
  mtimeNs: string;
  ctimeNs: string;
}

/** The {@link FileFingerprint} of `path`, or null when it does not exist. */
export async function fingerprint(path: string): Promise<FileFingerprint | null> {
  const st = await stat(path, { bigint: true }).catch(() => null);
  if (st === null) return null;
  return { ino: String(st.ino), sizeBytes: Number(st.size), mtimeNs: String(st.mtimeNs), ctimeNs: String(st.ctimeNs) };
}

function sameFingerprint(a: FileFingerprint | undefined, b: FileFingerprint | null): boolean {
  return (
    a !== undefined &&
    b !== null &&
    a.ino === b.ino &&
    a.sizeBytes === b.sizeBytes &&
    a.mtimeNs === b.mtimeNs &&
    a.ctimeNs === b.ctimeNs
  );
}

/**
 * What a pause image or snapshot directory holds, written last (atomically) so its presence means the state is
 * complete. Image files are hashed whole; the disk by its non-zero blocks (see {@link hashSparseFile}).
 */
export interface CheckpointManifest {
  format: typeof MANIFEST_FORMAT;
  /** Sandbox the state was taken from. */
  sandboxId: string;
  /** `runsc --version` first line, for example `runsc version 0.0~20240729.0`. */
  runscVersion: string;
  platform: string;
  createdAt: string;
  /** Checkpoint image files, empty for a filesystem-only snapshot. */
  image: ManifestFile[];
  /** The disk image; `sizeBytes` is its apparent size. */
  disk: ManifestFile;
  /** Bytes the disk occupies on the host. */
  diskAllocatedBytes: number;
  /**
   * Set on a pause image sealed with fingerprints only (its checksums are taken in the background after the pause
   * answered, see {@link completeChecksums}); absent once every `sha256` is filled in. Until then only the
   * fingerprint check of {@link verifyState} can accept it.
   */
  checksumsPending?: true;
  /** Set when the image files are encrypted (see image-encryption.ts): the format and the id of their key. */
  encryption?: ImageEncryptionInfo;
}

/** Where the parts of one saved state live. */
export interface StateLocation {
  /** Directory of the checkpoint image files (`checkpoint.img`, `pages.img`, …). */
  imageDir: string;
  /** The ext4 disk image. */
  diskPath: string;
  /** `manifest.json`. */
  manifestPath: string;
}

/** Layout of a snapshot directory: `manifest.json`, `disk.img`, `image/`. */
export function snapshotLocation(dir: string): StateLocation {
  return { imageDir: join(dir, 'image'), diskPath: join(dir, 'disk.img'), manifestPath: join(dir, 'manifest.json') };
}

/** The runtime build a checkpoint needs: version line and platform. */
export interface RuntimeIdentity {
  runscVersion: string;
  platform: string;
}

/** SHA-256 of a whole file, streamed. @throws the signal's reason once `signal` is aborted (checked per MiB) */
export async function hashFile(path: string, signal?: AbortSignal): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 20 })) {
    signal?.throwIfAborted();
    hash.update(chunk as Buffer);
  }
  return hash.digest('hex');
}

/** Block size the disk hash works in, bytes. */
const HASH_BLOCK_BYTES = 4096;
const ZERO_BLOCK = Buffer.alloc(HASH_BLOCK_BYTES);

/**
 * SHA-256 of a sparse file's content, independent of how it is laid out on the host: the hash covers the file
 * size and every non-zero 4 KiB block with its offset. Only the data extents (FIEMAP, via `filefrag`) are read, so
 * a 2 GiB disk holding a few MiB hashes in milliseconds; holes, unwritten extents and zero blocks all hash the
 * same, so a sparse copy hashes like its original. Without FIEMAP the whole file is read.
 */
export async function hashSparseFile(path: string, signal?: AbortSignal): Promise<string> {
  const size = (await stat(path)).size;
  const extents = (await dataExtents(path)) ?? [[0, size] as [number, number]];
  const hash = createHash('sha256');
  const header = Buffer.alloc(8);
  header.writeBigUInt64BE(BigInt(size));
  hash.update(header);
  const handle = await open(path, 'r');
  try {
    const chunk = Buffer.alloc(1 << 20);
    for (const [start, length] of extents) {
      const first = Math.floor(start / HASH_BLOCK_BYTES) * HASH_BLOCK_BYTES;
      const end = Math.min(size, start + length);
      for (let at = first; at < end; at += chunk.length) {
        signal?.throwIfAborted();
        const { bytesRead } = await handle.read(chunk, 0, Math.min(chunk.length, end - at), at);
        for (let offset = 0; offset < bytesRead; offset += HASH_BLOCK_BYTES) {
          const block = chunk.subarray(offset, Math.min(bytesRead, offset + HASH_BLOCK_BYTES));
          if (block.length === HASH_BLOCK_BYTES ? block.equals(ZERO_BLOCK) : block.every((b) => b === 0)) continue;
          const where = Buffer.alloc(8);
          where.writeBigUInt64BE(BigInt(at + offset));
          hash.update(where);
          hash.update(block);
        }
      }
    }
  } finally {
    await handle.close();
  }
  return hash.digest('hex');
}

/** Data extents of a file as [startBytes, lengthBytes], sorted and merged, or null when FIEMAP is unavailable. */
async function dataExtents(path: string): Promise<Array<[number, number]> | null> {
  const result = await runCommand('filefrag', ['-e', '-s', path]);
  if (result.exitCode !== 0) return null;
  const unit = Number(result.stdout.match(/blocks of (\d+) bytes/)?.[1] ?? Number.NaN);
  if (!Number.isFinite(unit)) return null;
  const extents: Array<[number, number]> = [];
  for (const line of result.stdout.split('\n')) {
    const match = line.match(/^\s*\d+:\s*(\d+)\.\.\s*(\d+):/);
    if (!match?.[1] || !match[2]) continue;
    const first = Number(match[1]);
    const last = Number(match[2]);
    extents.push([first * unit, (last - first + 1) * unit]);
  }
  extents.sort((x, y) => x[0] - y[0]);
  const merged: Array<[number, number]> = [];
  for (const extent of extents) {
    const previous = merged.at(-1);
    if (previous && extent[0] <= previous[0] + previous[1]) {
      previous[1] = Math.max(previous[1], extent[0] + extent[1] - previous[0]);
    } else merged.push([extent[0], extent[1]]);
  }
  return merged;
}

/** Copy a file keeping holes (and reflinking where the filesystem can). */
export async function copySparse(from: string, to: string): Promise<void> {
  await mustRun('cp', ['--sparse=always', '--reflink=auto', from, to], `copying ${from}`);
}

/** Bytes a file occupies on the host. */
export async function allocatedBytes(path: string): Promise<number> {
  const st = await stat(path);
  return st.blocks * 512;
}

/** Checksum every file of an image directory. */
export async function describeImage(imageDir: string): Promise<ManifestFile[]> {
  const names = (await readdir(imageDir)).sort();
  const files: ManifestFile[] = [];
  for (const name of names) {
    const path = join(imageDir, name);
    const st = await stat(path);
    if (!st.isFile()) continue;
    files.push({ name, sizeBytes: st.size, sha256: await hashFile(path) });
  }
  return files;
}

/** Sizes of every file of an image directory, checksums left empty (`''`) for {@link completeChecksums}. */
async function listImage(imageDir: string): Promise<ManifestFile[]> {
  const files: ManifestFile[] = [];
  for (const name of (await readdir(imageDir)).sort()) {
    const st = await stat(join(imageDir, name));
    if (st.isFile()) files.push({ name, sizeBytes: st.size, sha256: '' });
  }
  return files;
}

/**
 * Checksum the disk and image of `location` and write its manifest atomically. With `deferChecksums` (a pause
 * image only) nothing is hashed: the manifest gets fingerprints, empty checksums and `checksumsPending`, and
 * {@link completeChecksums} fills them in later.
 */
export async function writeManifest(
  location: StateLocation,
  options: {
    sandboxId: string;
    runtime: RuntimeIdentity;
    memory: boolean;
    image?: ManifestFile[];
    deferChecksums?: boolean;
  },
): Promise<CheckpointManifest> {
  const diskStat = await stat(location.diskPath);
  const defer = options.deferChecksums === true;
  // Read from the image itself: a snapshot of a pause image written before encryption was on stays plaintext.
  const encryption = options.memory ? await imageEncryptionOf(location.imageDir) : null;
  const [image, diskSha] = await Promise.all([
    options.memory
      ? (options.image ?? (defer ? listImage(location.imageDir) : describeImage(location.imageDir)))
      : Promise.resolve([]),
    defer ? Promise.resolve('') : hashSparseFile(location.diskPath),
  ]);
  // Fingerprints are taken after the hashes: the files are final by now (the caller froze them).
  const withPrints = async (file: ManifestFile, path: string): Promise<ManifestFile> => {
    const print = await fingerprint(path);
    return print === null ? file : { ...file, fingerprint: print };
  };
  const manifest: CheckpointManifest = {
    format: MANIFEST_FORMAT,
    sandboxId: options.sandboxId,
    runscVersion: options.runtime.runscVersion,
    platform: options.runtime.platform,
    createdAt: new Date().toISOString(),
    image: await Promise.all(image.map((f) => withPrints(f, join(location.imageDir, f.name)))),
    disk: await withPrints({ name: 'disk.img', sizeBytes: diskStat.size, sha256: diskSha }, location.diskPath),
    diskAllocatedBytes: diskStat.blocks * 512,
    ...(defer ? { checksumsPending: true as const } : {}),
    ...(encryption === null ? {} : { encryption }),
  };
  await replaceManifest(location, manifest);
  return manifest;
}

async function replaceManifest(location: StateLocation, manifest: CheckpointManifest): Promise<void> {
  const tmp = `${location.manifestPath}.tmp`;
  await writeFile(tmp, `${JSON.stringify(manifest, null, 2)}\n`);
  await rename(tmp, location.manifestPath);
}

/**
 * Fill in the checksums of a manifest sealed with `checksumsPending`: each file (image files, then the disk) is
 * hashed only if it still has its sealed fingerprint, before and after the hash, so a checksum is always of the
 * bytes the pause sealed. Rewrites the manifest atomically. The caller makes sure nothing else writes the manifest
 * meanwhile (the checkpointer aborts and awaits this before any other step on the sandbox).
 * @returns `done` (or nothing was pending), or `changed` when a file changed since the seal: the checksums stay
 *   pending, and the image can then never be verified by checksum (it is refused unless its fingerprints match)
 * @throws the signal's reason when aborted (the manifest is left as it was)
 */
export async function completeChecksums(location: StateLocation, signal?: AbortSignal): Promise<'done' | 'changed'> {
  const manifest = await readManifest(location);
  if (manifest === null || manifest.checksumsPending !== true) return 'done';
  const hashed = async (file: ManifestFile, path: string, sparse: boolean): Promise<ManifestFile | null> => {
    if (!sameFingerprint(file.fingerprint, await fingerprint(path))) return null;
    const sha256 = sparse ? await hashSparseFile(path, signal) : await hashFile(path, signal);
    if (!sameFingerprint(file.fingerprint, await fingerprint(path))) return null;
    return { ...file, sha256 };
  };
  const image: ManifestFile[] = [];
  for (const file of manifest.image) {
    const done = await hashed(file, join(location.imageDir, file.name), false);
    if (done === null) return 'changed';
    image.push(done);
  }
  const disk = await hashed(manifest.disk, location.diskPath, true);
  if (disk === null) return 'changed';
  signal?.throwIfAborted();
  const { checksumsPending: _pending, ...rest } = manifest;
  await replaceManifest(location, { ...rest, image, disk });
  return 'done';
}

/**
 * Take the checksum, fingerprint and allocation of `location`'s disk again and rewrite its manifest atomically; the
 * image files stay as sealed. For a disk this host verified and then mounted and unmounted without running the
 * sandbox on it (a restore that failed): ext4 writes mount times and counts into its superblock on every mount.
 * @throws CheckpointRejectedError when there is no manifest
 */
export async function resealDisk(location: StateLocation): Promise<CheckpointManifest> {
  const manifest = await readManifest(location);
  if (manifest === null) throw new CheckpointRejectedError(`no manifest at ${location.manifestPath}`);
  const sha256 = await hashSparseFile(location.diskPath);
  const diskStat = await stat(location.diskPath);
  const print = await fingerprint(location.diskPath);
  const resealed: CheckpointManifest = {
    ...manifest,
    disk: {
      name: manifest.disk.name,
      sizeBytes: diskStat.size,
      sha256,
      ...(print === null ? {} : { fingerprint: print }),
    },
    diskAllocatedBytes: diskStat.blocks * 512,
  };
  await replaceManifest(location, resealed);
  return resealed;
}

/** The manifest of `location`, or null when there is none (the state is incomplete). */
export async function readManifest(location: StateLocation): Promise<CheckpointManifest | null> {
  const text = await readFile(location.manifestPath, 'utf8').catch(() => null);
  if (text === null) return null;
  try {
    return JSON.parse(text) as CheckpointManifest;
  } catch {
    throw new CheckpointRejectedError(`the manifest ${location.manifestPath} is not valid JSON`);
  }
}

/**
 * Verify a saved state before a restore: manifest format, runtime version and platform (when it has an image),
 * every image file's size and checksum, and the disk's checksum. With `trustFingerprints` (a local pause image,
 * never a snapshot) the checksums are not recomputed when every file, the disk included, still has the
 * {@link FileFingerprint} recorded when the manifest was sealed; any difference falls back to the full check.
 * @throws CheckpointRejectedError naming what does not match
 */
export async function verifyState(
  location: StateLocation,
  options: { runtime: RuntimeIdentity; memory: boolean; sandboxId?: string; trustFingerprints?: boolean },
): Promise<CheckpointManifest> {
  const manifest = await readManifest(location);
  if (manifest === null) throw new CheckpointRejectedError(`no manifest at ${location.manifestPath}`);
  if (manifest.format !== MANIFEST_FORMAT) {
    throw new CheckpointRejectedError(`unknown checkpoint format ${String(manifest.format)}`);
  }
  if (options.sandboxId !== undefined && manifest.sandboxId !== options.sandboxId) {
    throw new CheckpointRejectedError(
      `the checkpoint belongs to sandbox ${manifest.sandboxId}, not ${options.sandboxId}`,
    );
  }
  if (options.memory) {
    if (manifest.image.length === 0) throw new CheckpointRejectedError('the snapshot holds no memory image');
    if (manifest.runscVersion !== options.runtime.runscVersion || manifest.platform !== options.runtime.platform) {
      throw new CheckpointRejectedError(
        `the image was written by ${manifest.runscVersion} (${manifest.platform}); this host runs ` +
          `${options.runtime.runscVersion} (${options.runtime.platform}), which cannot restore it`,
      );
    }
    const present = new Set(
      (await readdir(location.imageDir).catch(() => [] as string[])).filter((n) => !n.startsWith('.')),
    );
    // Fast path for a local pause image: same files, none written since the seal (no extra file either).
    if (
      options.trustFingerprints === true &&
      present.size === manifest.image.length &&
      manifest.image.every((f) => present.has(f.name))
    ) {
      const files = [
        ...manifest.image.map((f) => ({ file: f, path: join(location.imageDir, f.name) })),
        { file: manifest.disk, path: location.diskPath },
      ];
      const prints = await Promise.all(files.map(({ path }) => fingerprint(path)));
      if (files.every(({ file }, i) => sameFingerprint(file.fingerprint, prints[i] ?? null))) return manifest;
    }
    if (manifest.checksumsPending === true) {
      throw new CheckpointRejectedError(
        'the pause image or disk was changed after the pause, before its checksums were taken (altered); it cannot ' +
          'be verified and is not restored',
      );
    }
    for (const file of manifest.image) {
      const path = join(location.imageDir, file.name);
      const st = await stat(path).catch(() => null);
      if (st === null) throw new CheckpointRejectedError(`image file ${file.name} is missing`);
      if (st.size !== file.sizeBytes) {
        throw new CheckpointRejectedError(
          `image file ${file.name} is ${st.size} bytes, expected ${file.sizeBytes} (truncated or altered)`,
        );
      }
      if ((await hashFile(path)) !== file.sha256) {
        throw new CheckpointRejectedError(`image file ${file.name} does not match its checksum (altered)`);
      }
      present.delete(file.name);
    }
    if (present.size > 0) {
      throw new CheckpointRejectedError(`unexpected files in the image: ${[...present].sort().join(', ')}`);
    }
  }
  const diskStat = await stat(location.diskPath).catch(() => null);
  if (diskStat === null) throw new CheckpointRejectedError('the disk image is missing');
  if (diskStat.size !== manifest.disk.sizeBytes) {
    throw new CheckpointRejectedError(`the disk image is ${diskStat.size} bytes, expected ${manifest.disk.sizeBytes}`);
  }
  if ((await hashSparseFile(location.diskPath)) !== manifest.disk.sha256) {
    throw new CheckpointRejectedError('the disk image does not match its checksum (altered)');
  }
  return manifest;
}
