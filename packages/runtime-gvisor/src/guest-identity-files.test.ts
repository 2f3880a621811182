/** ensureGuestIdentity on real directories (no runsc): what it writes, what it keeps, what it never follows. */
import { lstat, mkdir, mkdtemp, readFile, readlink, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ensureGuestIdentity, etcHostsFor, GUEST_RESOLV_CONF } from './guest-identity-files.js';

describe('ensureGuestIdentity', () => {
  let dir = '';
  let rootfsDir = '';
  let upperDir = '';
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'burrow-guest-identity-'));
    rootfsDir = join(dir, 'rootfs');
    upperDir = join(dir, 'upper');
    await mkdir(join(rootfsDir, 'etc'), { recursive: true });
    await mkdir(upperDir);
    // What mmdebstrap leaves in a template: the build host's name and name server.
    await writeFile(join(rootfsDir, 'etc', 'hostname'), 'buildhost\n');
    await writeFile(join(rootfsDir, 'etc', 'resolv.conf'), 'nameserver 10.0.0.53\n');
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });
  const etc = (name: string) => readFile(join(rootfsDir, 'etc', name), 'utf8');

  it("replaces the template's hostname and resolv.conf and creates /etc/hosts", async () => {
    await ensureGuestIdentity({ rootfsDir, upperDir, hostname: 'sbx-abc' });
    expect(await etc('hostname')).toBe('sbx-abc\n');
    expect(await etc('resolv.conf')).toBe(GUEST_RESOLV_CONF);
    expect(await etc('resolv.conf')).not.toContain('nameserver');
    expect(await etc('hosts')).toBe(etcHostsFor('sbx-abc'));
  });

  it("keeps the sandbox's own edits (files in its upper dir) and an existing /etc/hosts", async () => {
    await mkdir(join(upperDir, 'etc'));
    await writeFile(join(upperDir, 'etc', 'hostname'), 'mine\n');
    await writeFile(join(rootfsDir, 'etc', 'hostname'), 'mine\n');
    await writeFile(join(rootfsDir, 'etc', 'hosts'), '10.1.1.1 custom\n');
    await ensureGuestIdentity({ rootfsDir, upperDir, hostname: 'sbx-abc' });
    expect(await etc('hostname')).toBe('mine\n');
    expect(await etc('hosts')).toBe('10.1.1.1 custom\n');
    expect(await etc('resolv.conf')).toBe(GUEST_RESOLV_CONF);
  });

  it('never follows a symlink planted at a file or at /etc', async () => {
    const outside = join(dir, 'host-file');
    await writeFile(outside, 'host secret\n');
    await rm(join(rootfsDir, 'etc', 'resolv.conf'));
    await symlink(outside, join(rootfsDir, 'etc', 'resolv.conf'));
    await symlink(outside, join(rootfsDir, 'etc', 'hosts'));
    await ensureGuestIdentity({ rootfsDir, upperDir, hostname: 'sbx-abc' });
    expect(await readFile(outside, 'utf8')).toBe('host secret\n');
    expect(await readlink(join(rootfsDir, 'etc', 'resolv.conf'))).toBe(outside);
    // An /etc that is a symlink (to a host directory) is not written into at all.
    const hostEtc = join(dir, 'host-etc');
    await mkdir(hostEtc);
    await rm(join(rootfsDir, 'etc'), { recursive: true });
    await symlink(hostEtc, join(rootfsDir, 'etc'));
    await ensureGuestIdentity({ rootfsDir, upperDir, hostname: 'sbx-abc' });
    expect(await lstat(join(hostEtc, 'hostname')).catch(() => null)).toBeNull();
    expect(await lstat(join(hostEtc, 'hosts')).catch(() => null)).toBeNull();
  });

  it('renames a disk copied from another sandbox (what Burrow wrote for it), and nothing else', async () => {
    const source = 'sbx-0123456789abcdefghjk';
    const child = 'sbx-zyxwvtsrqpnmkjhgfedc';
    await mkdir(join(upperDir, 'etc'));
    for (const dir of [upperDir, rootfsDir]) {
      await writeFile(join(dir, 'etc', 'hostname'), `${source}\n`);
      await writeFile(join(dir, 'etc', 'hosts'), etcHostsFor(source));
    }
    await ensureGuestIdentity({ rootfsDir, upperDir, hostname: child });
    expect(await etc('hostname')).toBe(`${child}\n`);
    expect(await etc('hosts')).toBe(etcHostsFor(child));
    // The sandbox's own words are kept: an edited /etc/hosts, a hostname Burrow does not give.
    await writeFile(join(rootfsDir, 'etc', 'hosts'), `${etcHostsFor(source)}10.1.1.1 db\n`);
    await writeFile(join(rootfsDir, 'etc', 'hostname'), 'sbx-mine\n');
    await ensureGuestIdentity({ rootfsDir, upperDir, hostname: child });
    expect(await etc('hosts')).toBe(`${etcHostsFor(source)}10.1.1.1 db\n`);
    expect(await etc('hostname')).toBe('sbx-mine\n');
  });

  it('writes no /etc/hostname for a name that is not a host name', async () => {
    await ensureGuestIdentity({ rootfsDir, upperDir, hostname: 'bad\nname' });
    expect(await etc('hostname')).toBe('buildhost\n');
    expect(await etc('resolv.conf')).toBe(GUEST_RESOLV_CONF);
  });
});
