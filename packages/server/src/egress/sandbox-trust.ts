import { SandboxFs } from '@burrow/runtime';
import { SANDBOX_CA_PATH, SANDBOX_SYSTEM_BUNDLE } from '../services/secret-service.js';

/**
 * CA bundles that get the egress CA appended when they are regular files in the sandbox: the system bundle (curl,
 * git, Python's ssl and anything on OpenSSL's default file) and copies of certifi's bundle that Python packages read
 * directly. A bundle that is a symlink (Debian's python3-certifi links the system one) is left alone.
 */
export const SANDBOX_CA_BUNDLES = [
  SANDBOX_SYSTEM_BUNDLE,
  '/usr/lib/python3/dist-packages/certifi/cacert.pem',
  '/usr/lib/python3/dist-packages/pip/_vendor/certifi/cacert.pem',
] as const;

/**
 * Install the egress CA into a new sandbox's trust stores, through the sandbox's root (never a host path):
 * `SANDBOX_CA_PATH` (what `NODE_EXTRA_CA_CERTS` names) and each of {@link SANDBOX_CA_BUNDLES} present.
 * @returns the bundles the CA was appended to
 * @throws FsError when a file cannot be written (disk full)
 */
export async function installEgressCa(rootDir: string, caPem: string): Promise<string[]> {
  const fs = new SandboxFs(rootDir);
  await fs.write(SANDBOX_CA_PATH, Buffer.from(caPem), { mode: 0o644 });
  const changed: string[] = [];
  for (const bundle of SANDBOX_CA_BUNDLES) {
    const info = await fs.stat(bundle).catch(() => null);
    if (info === null || info.type !== 'file') continue;
    const { stream } = await fs.openRead(bundle);
    const chunks: Buffer[] = [];
    for await (const chunk of stream) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    if (text.includes(caPem.trim())) continue;
    await fs.write(bundle, Buffer.from(`${text.endsWith('\n') || text === '' ? text : `${text}\n`}${caPem}`), {
      mode: info.mode,
    });
    changed.push(bundle);
  }
  return changed;
}
