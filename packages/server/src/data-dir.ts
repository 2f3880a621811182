import { chmod, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import Database from 'better-sqlite3';

/**
 * Make the data dir (mode 0700) or close one made beforehand to other host users: it holds the database, sandbox
 * disks and their files. `mkdir`'s mode applies only to a directory it makes (`mkdir /srv/burrow` gives 0755).
 * @throws Error for a shared directory (world-writable or sticky, as /tmp): refused rather than closed to everyone
 *   else
 */
export async function prepareDataDir(dataDir: string): Promise<void> {
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  if (((await stat(dataDir)).mode & 0o1002) !== 0) {
    throw new Error(
      `the data dir ${dataDir} is shared (world-writable or sticky, like /tmp); give Burrow a directory of ` +
        'its own (BURROW_DATA_DIR or --data-dir, e.g. /var/lib/burrow)',
    );
  }
  await chmod(dataDir, 0o700);
}

/** Held while a server owns its data dir; see {@link lockDataDir}. */
export interface DataDirLock {
  release(): void;
}

const LOCK_FILE = 'server.lock';
const LOCK_PID_FILE = 'server.lock.pid';

/**
 * Make this process the one server of `dataDir`: two servers on one data dir would both reconcile, reap and pause
 * the same sandboxes. The lock is SQLite's own exclusive lock on `<dataDir>/server.lock` (a POSIX advisory lock held
 * by an open transaction), so the kernel releases it when the process exits, `kill -9` included: no stale lock to
 * clear by hand. `burrow setup` and other tools that only migrate or read do not take it.
 * @throws Error naming the holder's pid when another live process holds it
 */
export async function lockDataDir(dataDir: string): Promise<DataDirLock> {
  const db = new Database(join(dataDir, LOCK_FILE), { timeout: 0 });
  try {
    db.pragma('locking_mode = EXCLUSIVE');
    db.exec('BEGIN EXCLUSIVE');
  } catch (error) {
    db.close();
    if ((error as { code?: unknown }).code !== 'SQLITE_BUSY') throw error;
    const holder = (await readFile(join(dataDir, LOCK_PID_FILE), 'utf8').catch(() => '')).trim();
    throw new Error(
      `another Burrow server${holder === '' ? '' : ` (pid ${holder})`} uses the data dir ${dataDir}; stop it first, ` +
        'or give this one another data dir (BURROW_DATA_DIR or --data-dir)',
      { cause: error },
    );
  }
  await writeFile(join(dataDir, LOCK_PID_FILE), `${process.pid}\n`);
  return { release: () => db.close() };
}
