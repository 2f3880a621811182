import { statfs } from 'node:fs/promises';
import { availableParallelism, totalmem } from 'node:os';

/** What this node can give one sandbox at most. */
export interface HostCapacity {
  /** CPU cores of the host. */
  cpuCount(): number;
  /** Host memory, MiB. */
  memoryMiB(): number;
  /** Free disk where sandbox disks live, MiB. */
  freeDiskMiB(): Promise<number>;
}

/**
 * The capacity of this host, with disk measured on the filesystem holding `dataDir`.
 * @example
 * const capacity = hostCapacity('/var/lib/burrow');
 */
export function hostCapacity(dataDir: string): HostCapacity {
  return {
    cpuCount: () => availableParallelism(),
    memoryMiB: () => Math.floor(totalmem() / 1024 / 1024),
    freeDiskMiB: async () => {
      const s = await statfs(dataDir);
      return Math.floor((Number(s.bavail) * Number(s.bsize)) / 1024 / 1024);
    },
  };
}
