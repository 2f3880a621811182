import { join } from 'node:path';
import { SandboxIdSchema } from '@burrow/contract';
import { RuntimeError } from '@burrow/runtime';

/** Host paths of one sandbox. */
export interface SandboxPaths {
  dir: string;
  /** Pause image and its manifest: `<dir>/checkpoint/`. */
  checkpointDir: string;
  image: string;
  diskDir: string;
  upperDir: string;
  workDir: string;
  rootfs: string;
  logsDir: string;
  /** The exec agent's binary and host socket, bind-mounted read-only at `/.burrow-agent`. */
  agentDir: string;
}

/** Host paths of the files of sandbox `sandboxId` under `dataDir`. @throws RuntimeError for a malformed id */
export function sandboxPaths(dataDir: string, sandboxId: string): SandboxPaths {
  if (!SandboxIdSchema.safeParse(sandboxId).success) throw new RuntimeError(`not a sandbox id: ${sandboxId}`);
  const dir = join(dataDir, 'sandboxes', sandboxId);
  const diskDir = join(dir, 'disk');
  return {
    dir,
    checkpointDir: join(dir, 'checkpoint'),
    image: join(dir, 'disk.img'),
    diskDir,
    upperDir: join(diskDir, 'upper'),
    workDir: join(diskDir, 'work'),
    rootfs: join(dir, 'rootfs'),
    logsDir: join(dir, 'logs'),
    agentDir: join(dir, 'agent'),
  };
}
