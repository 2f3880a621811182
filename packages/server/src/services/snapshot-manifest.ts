import { createHash } from 'node:crypto';
import { lstat, open, readdir, readlink } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { z } from 'zod';

/**
 * Fixed-size chunking: a snapshot's files (the checkpoint image and the disk layer) are cut at fixed offsets and
 * each piece is named by its sha256. Pages that did not change between two snapshots of a lineage sit at the same
 * offsets of the checkpoint image and of the disk layer file, so fixed offsets find most of the sharing at no CPU
 * cost beyond the hash; content-defined chunking would also survive insertions, which these files do not have.
 * @default 8_388_608 (8 MiB): a single PUT each, and few enough objects that a HEAD per chunk stays cheap
 */
export const DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024;

const entrySchema = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('file'),
    path: z.string(),
    mode: z.number().int(),
    sizeBytes: z.number().int().nonnegative(),
    chunks: z.array(z.string().regex(/^[0-9a-f]{64}$/)),
  }),
  z.object({ type: z.literal('dir'), path: z.string(), mode: z.number().int() }),
  z.object({ type: z.literal('symlink'), path: z.string(), target: z.string() }),
]);

/** What a snapshot is made of: its files, in order, each as a list of chunk hashes. Stored as JSON. */
export const manifestSchema = z.object({
  version: z.literal(1),
  key: z.string(),
  chunkBytes: z.number().int().positive(),
  entries: z.array(entrySchema),
});
export type SnapshotManifest = z.infer<typeof manifestSchema>;
export type ManifestEntry = z.infer<typeof entrySchema>;

/** The hex sha256 of `bytes`. */
export function sha256Hex(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** Paths in a manifest are relative, with no `..` or leading `/`: a manifest never writes outside its dir. */
export function checkManifestPath(path: string): void {
  if (path === '' || path.startsWith('/') || path.split('/').some((p) => p === '..' || p === '.' || p === '')) {
    throw new Error(`manifest path escapes the snapshot: ${path}`);
  }
}

/**
 * Walk `dir` and hash every regular file in `chunkBytes` pieces.
 * @returns the manifest and, per chunk hash, where its bytes are (the first file and offset holding them)
 * @throws Error on a special file (socket, device, fifo): a snapshot holds none
 */
export async function buildManifest(
  key: string,
  dir: string,
  chunkBytes: number,
): Promise<{ manifest: SnapshotManifest; sources: Map<string, ChunkSource> }> {
  const entries: ManifestEntry[] = [];
  const sources = new Map<string, ChunkSource>();
  const walk = async (at: string): Promise<void> => {
    const names = (await readdir(at)).sort();
    for (const name of names) {
      const full = join(at, name);
      const path = relative(dir, full);
      const lst = await lstat(full);
      if (lst.isSymbolicLink()) {
        entries.push({ type: 'symlink', path, target: await readlink(full) });
      } else if (lst.isDirectory()) {
        entries.push({ type: 'dir', path, mode: lst.mode & 0o7777 });
        await walk(full);
      } else if (lst.isFile()) {
        const chunks = await hashFile(full, lst.size, chunkBytes, sources);
        entries.push({ type: 'file', path, mode: lst.mode & 0o7777, sizeBytes: lst.size, chunks });
      } else {
        throw new Error(`a snapshot holds only files, directories and symlinks: ${path}`);
      }
    }
  };
  await walk(dir);
  return { manifest: { version: 1, key, chunkBytes, entries }, sources };
}

/** Where a chunk's bytes are on the local disk. */
export interface ChunkSource {
  file: string;
  offset: number;
  sizeBytes: number;
}

async function hashFile(
  file: string,
  sizeBytes: number,
  chunkBytes: number,
  sources: Map<string, ChunkSource>,
): Promise<string[]> {
  const hashes: string[] = [];
  const handle = await open(file, 'r');
  try {
    const buffer = Buffer.allocUnsafe(Math.min(chunkBytes, Math.max(sizeBytes, 1)));
    for (let offset = 0; offset < sizeBytes; offset += chunkBytes) {
      const length = Math.min(chunkBytes, sizeBytes - offset);
      const { bytesRead } = await handle.read(buffer, 0, length, offset);
      if (bytesRead !== length) throw new Error(`${file} changed while it was hashed`);
      const hash = sha256Hex(buffer.subarray(0, length));
      hashes.push(hash);
      if (!sources.has(hash)) sources.set(hash, { file, offset, sizeBytes: length });
    }
  } finally {
    await handle.close();
  }
  return hashes;
}

/** Read one chunk's bytes from where {@link buildManifest} found them. */
export async function readChunk(source: ChunkSource): Promise<Buffer> {
  const handle = await open(source.file, 'r');
  try {
    const buffer = Buffer.allocUnsafe(source.sizeBytes);
    const { bytesRead } = await handle.read(buffer, 0, source.sizeBytes, source.offset);
    if (bytesRead !== source.sizeBytes) throw new Error(`${source.file} shrank while it was uploaded`);
    return buffer;
  } finally {
    await handle.close();
  }
}
