import { ErrorCode } from '@burrow/contract';
import { FsError, type SandboxFs } from '@burrow/runtime';
import { ApiError } from '../util/api-error.js';

/** A user of a sandbox, from its `/etc/passwd`. */
export interface SandboxUser {
  name: string;
  uid: number;
  gid: number;
  home: string;
}

/** Most bytes of `/etc/passwd` read. */
const PASSWD_MAX_BYTES = 1024 * 1024;

/** The entry of `user` (a name or a numeric uid) in `passwd` text, or null. A uid without an entry gets gid = uid. */
export function findUser(passwd: string, user: string): SandboxUser | null {
  const numeric = /^\d+$/.test(user);
  for (const line of passwd.split('\n')) {
    const [name, , uid, gid, , home] = line.split(':');
    if (name === undefined || uid === undefined || gid === undefined) continue;
    if (numeric ? uid === user : name === user) {
      const u = Number(uid);
      const g = Number(gid);
      if (!Number.isInteger(u) || !Number.isInteger(g)) continue;
      return { name, uid: u, gid: g, home: home || '/' };
    }
  }
  if (numeric) {
    const uid = Number(user);
    if (uid <= 0xfffffffe) return { name: user, uid, gid: uid, home: '/' };
  }
  return null;
}

/**
 * Look `user` up in the sandbox's `/etc/passwd` (read through {@link SandboxFs}).
 * @throws ApiError `user_not_found` when the name is not there
 */
export async function resolveUser(fs: SandboxFs, user: string): Promise<SandboxUser> {
  let passwd = '';
  try {
    const handle = await fs.openFile('/etc/passwd');
    try {
      const buffer = Buffer.alloc(PASSWD_MAX_BYTES);
      const { bytesRead } = await handle.read(buffer, 0, PASSWD_MAX_BYTES, 0);
      passwd = buffer.subarray(0, bytesRead).toString('utf8');
    } finally {
      await handle.close();
    }
  } catch (error) {
    if (!(error instanceof FsError)) throw error;
  }
  const found = findUser(passwd, user);
  if (found === null) {
    throw new ApiError(ErrorCode.userNotFound, `no user ${user} in the sandbox's /etc/passwd`, {
      hint: 'create it first (useradd) or pass a numeric uid',
    });
  }
  return found;
}
