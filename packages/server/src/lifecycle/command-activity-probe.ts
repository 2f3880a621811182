import { type RuntimeDriver, SandboxFs } from '@burrow/runtime';
import type { CommandService } from '../services/command-service.js';
import { COMMANDS_DIR } from '../services/supervisor-script.js';

/**
 * Whether a background command runs in sandbox `id` (a running command is activity: the idle policy never
 * pauses it). Reads the supervisor's files through {@link SandboxFs} without resuming the sandbox or touching
 * its activity; any read failure counts as busy, so a doubt never pauses a sandbox.
 * @returns true when some command's status is `running`
 */
export async function hasRunningCommand(driver: RuntimeDriver, commands: CommandService, id: string): Promise<boolean> {
  const fs = new SandboxFs(driver.rootDir(id));
  let names: string[];
  try {
    const entries = await fs.list(COMMANDS_DIR);
    names = entries
      .filter((e) => e.type === 'directory')
      .map((e) => e.path.slice(e.path.lastIndexOf('/') + 1))
      .filter((n) => /^cmd_[0-9a-z]{20}$/.test(n));
  } catch (error) {
    return (error as { code?: unknown }).code !== 'file_not_found';
  }
  for (const name of names) {
    const info = await commands.info(fs, id, name).catch(() => null);
    if (info?.status === 'running') return true;
  }
  return false;
}
