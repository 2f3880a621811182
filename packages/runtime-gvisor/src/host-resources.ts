import { lstat, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SandboxIdSchema } from '@burrow/contract';
import type { HostResourceKind, HostResources } from '@burrow/runtime';
import { cgroupChildren, fileExists, loopDevicesUnder, mountsUnder } from './host-plumbing.js';
import type { RunscCli } from './runsc-cli.js';
import type { SandboxCgroups } from './sandbox-cgroups.js';
import { sandboxPaths } from './sandbox-paths.js';

/** Where a driver instance's sandboxes leave things on the host. */
export interface HostResourceSources {
  runsc: RunscCli;
  /** The driver's data dir (`<dataDir>/sandboxes/<id>/`). */
  dataDir: string;
  cgroups: SandboxCgroups;
}

/**
 * Every sandbox id with something of it on this host (runsc container, directory, mount, loop device, cgroup),
 * with the kinds found, both sorted.
 */
export async function listHostResources(sources: HostResourceSources): Promise<HostResources> {
  const kinds = new Map<string, Set<HostResourceKind>>();
  const add = (id: string | undefined, kind: HostResourceKind): void => {
    if (!id || !SandboxIdSchema.safeParse(id).success) return;
    const set = kinds.get(id) ?? new Set<HostResourceKind>();
    set.add(kind);
    kinds.set(id, set);
  };
  for (const id of await sources.runsc.list()) add(id, 'container');
  const sandboxesDir = join(sources.dataDir, 'sandboxes');
  for (const name of await readdir(sandboxesDir).catch(() => [] as string[])) add(name, 'directory');
  for (const point of await mountsUnder(sandboxesDir)) {
    add(point.slice(sandboxesDir.length + 1).split('/')[0], 'mount');
  }
  for (const device of await loopDevicesUnder(sandboxesDir)) {
    const backing = await readFile(`/sys/block/${device.slice(5)}/loop/backing_file`, 'utf8').catch(() => '');
    add(backing.slice(sandboxesDir.length + 1).split('/')[0], 'loop_device');
  }
  for (const name of await cgroupChildren(sources.cgroups.root, sources.cgroups.parent)) add(name, 'cgroup');
  const sandboxIds = [...kinds.keys()].sort();
  return { sandboxIds, kinds: Object.fromEntries(sandboxIds.map((id) => [id, [...(kinds.get(id) ?? [])].sort()])) };
}

/** What of the sandbox is still on the host, one line per resource. */
export async function remainingResources(sources: HostResourceSources, sandboxId: string): Promise<string[]> {
  const paths = sandboxPaths(sources.dataDir, sandboxId);
  const remaining: string[] = [];
  if ((await sources.runsc.list()).includes(sandboxId)) remaining.push(`runsc container ${sandboxId}`);
  for (const point of await mountsUnder(paths.dir)) remaining.push(`mount ${point}`);
  for (const device of await loopDevicesUnder(paths.dir)) remaining.push(`loop device ${device}`);
  for (const dir of await sources.cgroups.dirsOf(sandboxId)) remaining.push(`cgroup ${dir}`);
  if (await fileExists(paths.dir)) remaining.push(`directory ${paths.dir}`);
  return remaining;
}

/** Allocated bytes of everything beneath `dir` (0 when absent); mount points are not descended into. */
export async function allocatedBytes(dir: string): Promise<number> {
  const root = await lstat(dir).catch(() => null);
  if (root === null) return 0;
  let total = root.blocks * 512;
  if (!root.isDirectory()) return total;
  const mounted = new Set(await mountsUnder(dir));
  const queue = [dir];
  while (queue.length > 0) {
    const next = queue.pop() as string;
    for (const entry of await readdir(next, { withFileTypes: true }).catch(() => [])) {
      const path = join(next, entry.name);
      if (mounted.has(path)) continue;
      const st = await lstat(path).catch(() => null);
      if (st === null) continue;
      total += st.blocks * 512;
      if (st.isDirectory()) queue.push(path);
    }
  }
  return total;
}
