import { createHmac, randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { type RuntimeDriver, SandboxFs } from '@burrow/runtime';
import type { SandboxRecord } from '../../store/sandbox-store.js';

/** The user E2B's clients expect commands and files to default to. */
export const E2B_DEFAULT_USER = 'user';

/**
 * Access tokens of E2B sandboxes: HMAC-SHA256 of the sandbox id under a server secret kept in
 * `<dataDir>/e2b-secret` (0600), so a token is the same across server restarts and needs no row.
 * @throws Error when the secret file cannot be read or written
 */
export async function loadTokenSecret(path: string): Promise<(sandboxId: string) => string> {
  let secret = await readFile(path, 'utf8').catch(() => '');
  if (!/^[0-9a-f]{64}$/.test(secret.trim())) {
    secret = randomBytes(32).toString('hex');
    await writeFile(path, `${secret}\n`, { mode: 0o600 });
  }
  const key = Buffer.from(secret.trim(), 'hex');
  return (sandboxId) => createHmac('sha256', key).update(sandboxId).digest('hex');
}

/** The default user and working directory of a sandbox's envd calls. */
export interface E2bSandboxDefaults {
  of(record: SandboxRecord): Promise<{ user: string | undefined; cwd: string }>;
}

/**
 * Defaults by what the sandbox holds: user `user` in `/home/user` when its template has that user (the `e2b-base`
 * template does), else the sandbox's own user (root) and working directory. Looked up once per sandbox.
 */
export function sandboxDefaults(driver: RuntimeDriver): E2bSandboxDefaults {
  const known = new Map<string, { user: string | undefined; cwd: string }>();
  return {
    async of(record) {
      const cached = known.get(record.id);
      if (cached !== undefined) return cached;
      const passwd = await new SandboxFs(driver.rootDir(record.id))
        .openRead('/etc/passwd')
        .then(async ({ stream }) => {
          const chunks: Buffer[] = [];
          for await (const chunk of stream) chunks.push(chunk as Buffer);
          return Buffer.concat(chunks).toString('utf8');
        })
        .catch(() => '');
      const hasUser = passwd.split('\n').some((line) => line.startsWith(`${E2B_DEFAULT_USER}:`));
      const value = hasUser
        ? { user: E2B_DEFAULT_USER, cwd: `/home/${E2B_DEFAULT_USER}` }
        : { user: undefined, cwd: record.cwd };
      known.set(record.id, value);
      if (known.size > 10_000) known.delete(known.keys().next().value as string);
      return value;
    },
  };
}
