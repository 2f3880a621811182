/** Bytes a volume's filesystem holds and may hold. */
export interface VolumeUsage {
  /** Bytes its files occupy (allocated blocks), as `df` counts them. */
  usedBytes: number;
  /** Bytes its files may occupy in all: a write past it fails with ENOSPC. */
  limitBytes: number;
}

/**
 * Host storage of volumes: one filesystem of a fixed size per volume, mounted on the host while the volume exists,
 * so sandboxes bind it and file calls reach it without a sandbox. Every verb is idempotent and leaves nothing
 * half-made on failure.
 */
export interface VolumeHost {
  /**
   * Make the volume's filesystem of `sizeMiB` and mount it (read-only when `readOnly`). An existing one is mounted
   * again if it is not.
   * @throws RuntimeError (nothing of the volume is left)
   */
  create(volumeId: string, sizeMiB: number, options?: { readOnly?: boolean }): Promise<void>;
  /**
   * Mount an existing volume again after a restart (read-only when `readOnly`). @throws RuntimeError when its
   * storage is gone
   */
  ensureMounted(volumeId: string, options?: { readOnly?: boolean }): Promise<void>;
  /** Host path of the volume's root directory (what a sandbox sees at its mount path). */
  rootDir(volumeId: string): string;
  /** Bytes used and the limit. @throws RuntimeError when it is not mounted */
  usage(volumeId: string): Promise<VolumeUsage>;
  /** Grow the filesystem to `sizeMiB` while mounted. @throws RuntimeError when smaller than now */
  grow(volumeId: string, sizeMiB: number): Promise<void>;
  /**
   * A point-in-time copy of `sourceId` as `targetId`: the source is frozen (writers inside sandboxes wait) while its
   * storage is copied, so the copy is what a crash at that instant would leave, journal replayed. Mounted
   * read-only when `readOnly`.
   * @returns how the copy was made (`reflink` shares blocks; `sparse-copy` copies the allocated ones)
   */
  copy(
    sourceId: string,
    targetId: string,
    options: { readOnly: boolean },
  ): Promise<{ method: 'reflink' | 'sparse-copy' }>;
  /** Unmount, release its device and remove its storage, then check none is left. @throws RuntimeError if some is */
  delete(volumeId: string): Promise<void>;
  /** Ids of every volume with storage, a mount or a device on this host. */
  list(): Promise<string[]>;
  /** Bytes the volume's storage occupies on the host (allocated), 0 when gone. */
  hostBytes(volumeId: string): Promise<number>;
}
