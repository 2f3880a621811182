import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { cgroupChildren, cgroupDirs, removeEmptyCgroupParent } from './host-plumbing.js';

/**
 * Parent of every Burrow instance's cgroups; each instance (data dir) has its own child, see
 * {@link SandboxCgroups.parent}.
 */
export const CGROUP_PARENT = 'burrow';
/** See `GvisorDriverOptions.cgroupOwnersDir`. */
const DEFAULT_CGROUP_OWNERS_DIR = '/run/burrow/cgroup-parents';

/** The 12 hex of an instance's cgroup parent `burrow/<hash>`: sha256 of its data dir's absolute path. */
export function cgroupParentHash(dataDir: string): string {
  return createHash('sha256').update(resolve(dataDir)).digest('hex').slice(0, 12);
}

/**
 * The cgroup v1 directories of one driver instance: its parent `burrow/<hash>`, the sandboxes' cgroups under it,
 * and the owner records that let another instance reap a parent whose data dir is gone.
 */
export class SandboxCgroups {
  /** Root of the cgroup v1 hierarchies. */
  readonly root: string;
  /**
   * This instance's cgroup parent, `burrow/<12 hex of sha256(dataDir)>`: two servers (or a server and the tests)
   * on one host never see, count or reap each other's sandboxes.
   */
  readonly parent: string;
  /** See `GvisorDriverOptions.cgroupOwnersDir`. */
  private readonly ownersDir: string;
  /** The owner record of this instance's cgroup parent, written once before the first sandbox starts. */
  private ownerRecorded: Promise<void> | null = null;

  constructor(
    private readonly options: {
      dataDir: string;
      /** @default '/sys/fs/cgroup' */
      root?: string | undefined;
      /** @default '/run/burrow/cgroup-parents' */
      ownersDir?: string | undefined;
      warn(object: object, message: string): void;
    },
  ) {
    this.root = options.root ?? '/sys/fs/cgroup';
    this.parent = `${CGROUP_PARENT}/${cgroupParentHash(options.dataDir)}`;
    this.ownersDir = options.ownersDir ?? DEFAULT_CGROUP_OWNERS_DIR;
  }

  /** The sandbox's memory cgroup directory. */
  memory(sandboxId: string): string {
    return join(this.root, 'memory', this.parent, sandboxId);
  }

  /** The sandbox's pids cgroup directory: its sentry, gofer and stubs. */
  pids(sandboxId: string): string {
    return join(this.root, 'pids', this.parent, sandboxId);
  }

  /** The sandbox's cgroup directories that exist, in every hierarchy. */
  dirsOf(sandboxId: string): Promise<string[]> {
    return cgroupDirs(this.root, this.parent, sandboxId);
  }

  /**
   * Remove this instance's cgroup parent `burrow/<hash>` where it is empty (no sandbox cgroup left under it:
   * sandboxes still running keep it), with its owner record once it is gone.
   */
  async removeParentIfEmpty(): Promise<void> {
    if (await removeEmptyCgroupParent(this.root, this.parent)) {
      await rm(this.ownerFile(this.parent.slice(CGROUP_PARENT.length + 1)), { force: true }).catch(() => undefined);
      this.ownerRecorded = null;
    }
  }

  /** The owner record of cgroup parent `burrow/<hash>`. */
  private ownerFile(hash: string): string {
    return join(this.ownersDir, hash);
  }

  /** Record (once) that this instance's cgroup parent belongs to its data dir. Failures only lose the record. */
  recordOwner(): Promise<void> {
    this.ownerRecorded ??= (async () => {
      await mkdir(this.ownersDir, { recursive: true });
      await writeFile(this.ownerFile(this.parent.slice(CGROUP_PARENT.length + 1)), resolve(this.options.dataDir));
    })().catch((error: unknown) => this.options.warn({ err: error }, 'recording the cgroup parent owner failed'));
    return this.ownerRecorded;
  }

  /**
   * Remove the empty cgroup parents `burrow/<hash>` of other instances whose data dir no longer exists (their
   * owner record names it), and empty ones without a record (none was written) untouched for
   * `unrecordedAgeMs`. Never this instance's own, never one with a sandbox cgroup under it.
   * @param options.unrecordedAgeMs @default 3_600_000 (1 hour)
   * @returns the hashes removed
   */
  async reapStaleParents(options: { unrecordedAgeMs?: number } = {}): Promise<string[]> {
    const own = this.parent.slice(CGROUP_PARENT.length + 1);
    const removed: string[] = [];
    for (const hash of await cgroupChildren(this.root, CGROUP_PARENT)) {
      if (hash === own || !/^[0-9a-f]{12}$/.test(hash)) continue;
      const owner = await readFile(this.ownerFile(hash), 'utf8').catch(() => null);
      if (owner !== null) {
        if (existsSync(owner)) continue;
      } else {
        const dirs = await cgroupDirs(this.root, '', join(CGROUP_PARENT, hash));
        const newestMs = Math.max(
          0,
          ...(await Promise.all(
            dirs.map((d) =>
              stat(d).then(
                (st) => st.mtimeMs,
                () => 0,
              ),
            ),
          )),
        );
        if (Date.now() - newestMs < (options.unrecordedAgeMs ?? 3_600_000)) continue;
      }
      if (await removeEmptyCgroupParent(this.root, join(CGROUP_PARENT, hash))) {
        await rm(this.ownerFile(hash), { force: true }).catch(() => undefined);
        removed.push(hash);
      }
    }
    return removed;
  }
}

/**
 * CPU time (`cpuacct.usage`, ns) and memory (`memory.usage_in_bytes`) of sandbox `sandboxId`'s cgroup v1
 * directories under `parent`; null when either file is missing (no such sandbox cgroup: not running here).
 */
export async function readCgroupUsage(
  root: string,
  parent: string,
  sandboxId: string,
): Promise<{ cpuNs: number; memoryBytes: number } | null> {
  const read = (controller: string, file: string) =>
    readFile(join(root, controller, parent, sandboxId, file), 'utf8').then(
      (text) => Number(text.trim()),
      () => null,
    );
  const [cpuNs, memoryBytes] = await Promise.all([
    read('cpuacct', 'cpuacct.usage'),
    read('memory', 'memory.usage_in_bytes'),
  ]);
  if (cpuNs === null || memoryBytes === null || !Number.isFinite(cpuNs) || !Number.isFinite(memoryBytes)) return null;
  return { cpuNs, memoryBytes };
}
