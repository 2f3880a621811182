import { constants as fsc } from 'node:fs';
import { type FileHandle, lstat, open } from 'node:fs/promises';
import { join } from 'node:path';

/** Host names that go into /etc/hosts as they are (anything else is left out). */
export const HOSTNAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9.-]{0,252}$/;

/**
 * The /etc/hosts of a sandbox named `hostname`: loopback for `localhost` and for its own name (sandboxes have no
 * network, so nothing else resolves).
 * @example etcHostsFor('sbx-abc') // '127.0.0.1\tlocalhost\n127.0.1.1\tsbx-abc\n::1\tlocalhost ip6-localhost ip6-loopback\n'
 */
export function etcHostsFor(hostname: string): string {
  const own = HOSTNAME_PATTERN.test(hostname) ? `127.0.1.1\t${hostname}\n` : '';
  return `127.0.0.1\tlocalhost\n${own}::1\tlocalhost ip6-localhost ip6-loopback\n`;
}

/**
 * Give a sandbox root filesystem that has no /etc/hosts one from {@link etcHostsFor} (Debian minbase templates have
 * none, so `localhost` did not resolve inside sandboxes). An existing /etc/hosts, or an /etc that is not a real
 * directory, is left alone; the file is created with `O_EXCL | O_NOFOLLOW`, so a symlink the sandbox planted there
 * is never followed. Call before the sandbox runs.
 * @param rootfsDir the sandbox's mounted root filesystem on the host
 */
export async function ensureEtcHosts(rootfsDir: string, hostname: string): Promise<void> {
  const etc = join(rootfsDir, 'etc');
  const st = await lstat(etc).catch(() => null);
  if (st === null || !st.isDirectory()) return;
  let handle: FileHandle;
  try {
    handle = await open(join(etc, 'hosts'), fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o644);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return;
    throw error;
  }
  try {
    await handle.writeFile(etcHostsFor(hostname));
  } finally {
    await handle.close();
  }
}
