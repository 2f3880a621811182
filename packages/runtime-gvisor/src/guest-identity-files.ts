import { constants as fsc } from 'node:fs';
import { type FileHandle, lstat, open } from 'node:fs/promises';
import { join } from 'node:path';
import { ID_ALPHABET, ID_RANDOM_LENGTH } from '@burrow/contract';
import { GUEST_GATEWAY } from './network/network-rules.js';

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

/** The /etc/resolv.conf of a sandbox without a network: no name server. */
export const GUEST_RESOLV_CONF = '# Burrow: this sandbox has no network, so no name server.\n';

/**
 * The /etc/resolv.conf of a sandbox with a network: its gateway, where the router sends DNS on to Burrow's resolver
 * (the same address in every sandbox, see network/network-rules.ts).
 */
export const GUEST_RESOLV_CONF_NETWORK = `# Burrow: DNS goes to Burrow's resolver through the sandbox's gateway.\nnameserver ${GUEST_GATEWAY}\n`;

/**
 * Give a sandbox root filesystem its own identity files before it runs:
 * - /etc/hosts from {@link etcHostsFor} when it has none (Debian minbase templates have none, so `localhost` did
 *   not resolve inside sandboxes); an existing one is left alone;
 * - /etc/hostname (`hostname`) and /etc/resolv.conf ({@link GUEST_RESOLV_CONF}) while they are still the
 *   template's, i.e. absent from the sandbox's own `upperDir`: mmdebstrap copies the build host's two files into
 *   the template, which named the host and its name server inside every sandbox. A sandbox's own edit (in its
 *   upper dir) is kept;
 * - /etc/hostname and /etc/hosts that Burrow wrote for another sandbox (their bytes are exactly what this function
 *   writes for a name of the form `sbx-` + 20 id characters): a disk copied from another sandbox, as a sandbox
 *   created filesystem-only from a snapshot, names itself, not its source.
 * Files are opened with `O_NOFOLLOW` under an /etc that must be a real directory, so a symlink planted there (by a
 * template or by the sandbox) is never followed on the host.
 * @param rootfsDir the sandbox's mounted (merged) root filesystem on the host
 * @param upperDir the overlay's upper dir (what the sandbox changed), or null to treat every file as the template's
 */
export async function ensureGuestIdentity(options: {
  rootfsDir: string;
  upperDir: string | null;
  hostname: string;
  /** The sandbox has a network: /etc/resolv.conf names its gateway. @default false */
  network?: boolean | undefined;
}): Promise<void> {
  const etc = join(options.rootfsDir, 'etc');
  const st = await lstat(etc).catch(() => null);
  if (st === null || !st.isDirectory()) return;
  const hosts = join(etc, 'hosts');
  const foreignHosts = await writtenForAnotherSandbox(hosts, etcHostsFor);
  await writeGuestFile(hosts, etcHostsFor(options.hostname), foreignHosts ? 'replace' : 'create');
  const resolvConf = options.network === true ? GUEST_RESOLV_CONF_NETWORK : GUEST_RESOLV_CONF;
  const files: Array<[string, (hostname: string) => string]> = [['resolv.conf', () => resolvConf]];
  if (HOSTNAME_PATTERN.test(options.hostname)) files.push(['hostname', hostnameFileFor]);
  for (const [name, render] of files) {
    const own = options.upperDir === null ? null : await lstat(join(options.upperDir, 'etc', name)).catch(() => null);
    const burrowResolvConf =
      name === 'resolv.conf' &&
      [GUEST_RESOLV_CONF, GUEST_RESOLV_CONF_NETWORK].includes((await readSmallFile(join(etc, name))) ?? '');
    if (own === null || burrowResolvConf || (await writtenForAnotherSandbox(join(etc, name), render))) {
      await writeGuestFile(join(etc, name), render(options.hostname), 'replace');
    }
  }
}

const hostnameFileFor = (hostname: string) => `${hostname}\n`;

/** A host name Burrow gives a sandbox: its id with `-` for `_` (`sbx-` + the id's random part). */
const BURROW_HOSTNAME = new RegExp(`sbx-[${ID_ALPHABET}]{${ID_RANDOM_LENGTH}}`);

/**
 * Whether the regular file at `path` holds exactly what `render` writes for a Burrow-given host name (the first
 * such name in it): a file Burrow wrote for the sandbox whose disk this was. Never through a symlink.
 */
async function writtenForAnotherSandbox(path: string, render: (hostname: string) => string): Promise<boolean> {
  const text = await readSmallFile(path);
  const name = text === null ? undefined : BURROW_HOSTNAME.exec(text)?.[0];
  return name !== undefined && text === render(name);
}

/** The first 4 KiB of the regular file at `path` as UTF-8, never through a symlink; null when there is none. */
async function readSmallFile(path: string): Promise<string | null> {
  let handle: FileHandle;
  try {
    handle = await open(path, fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK);
  } catch {
    return null;
  }
  try {
    if (!(await handle.stat()).isFile()) return null;
    const buffer = Buffer.alloc(4096);
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
    return buffer.subarray(0, bytesRead).toString('utf8');
  } finally {
    await handle.close();
  }
}

/**
 * Write `text` to `path` without following a symlink at it: `create` only when nothing is there, `replace` a
 * regular file or nothing. A symlink, directory or device there is left alone.
 */
async function writeGuestFile(path: string, text: string, mode: 'create' | 'replace'): Promise<void> {
  const existing = await lstat(path).catch(() => null);
  if (existing !== null && (mode === 'create' || !existing.isFile())) return;
  const flags = fsc.O_WRONLY | fsc.O_CREAT | fsc.O_NOFOLLOW | (mode === 'create' ? fsc.O_EXCL : fsc.O_TRUNC);
  let handle: FileHandle;
  try {
    handle = await open(path, flags, 0o644);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST' || code === 'ELOOP' || code === 'EISDIR') return;
    throw error;
  }
  try {
    await handle.writeFile(text);
  } finally {
    await handle.close();
  }
}
