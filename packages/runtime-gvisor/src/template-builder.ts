import { createHash, randomBytes } from 'node:crypto';
import { constants as fsConstants } from 'node:fs';
import { access, mkdir, open, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { TemplateRef } from '@burrow/runtime';
import { RuntimeError } from '@burrow/runtime';
import { buildOciSpec } from './oci-spec.js';
import { abortError, runCommand, tail } from './run-command.js';

/**
 * Debian packages of every template: what agents expect (python3 with pip and venv, node with npm, git, curl,
 * certificates), kept lean. `tini` is the sandbox's init.
 */
export const BASE_PACKAGES: readonly string[] = [
  'python3',
  'python3-pip',
  'python3-venv',
  'nodejs',
  'npm',
  'git',
  'curl',
  'ca-certificates',
  'procps',
  'tini',
];

/**
 * dpkg options of every template's root filesystem. mmdebstrap writes them to `/etc/dpkg/dpkg.cfg.d/99mmdebstrap`
 * inside the root, so they hold for packages installed later too (`apt-get install` in a sandbox).
 *
 * `EXTERNALLY-MANAGED` (PEP 668) is never installed: without it `pip install` works for root (into
 * `/usr/local/lib/python3.11/dist-packages`, which Debian's own packages never write) and for any other user (pip
 * falls back to `~/.local`, as the system site is not writable). Excluding the file, rather than setting
 * `break-system-packages` in `/etc/pip.conf`, covers every installer that honours the marker (pip, uv, pipx) and
 * every pip configuration a user brings (a user's `pip.conf` or `PIP_CONFIG_FILE` replaces nothing here), and an
 * upgrade of `libpython3.*-stdlib` cannot bring the marker back. Part of the template id.
 */
export const ROOTFS_DPKG_OPTIONS: readonly string[] = [
  'path-exclude=/usr/share/man/*',
  'path-exclude=/usr/share/doc/*',
  'path-include=/usr/share/doc/*/copyright',
  'path-exclude=/usr/share/locale/*',
  'path-exclude=/usr/share/info/*',
  'path-exclude=/usr/lib/python3*/EXTERNALLY-MANAGED',
];

/** Debian suite templates are built from. */
export const TEMPLATE_SUITE = 'bookworm';

/** What a template is made of. Its canonical JSON is hashed into the template id. */
export interface TemplateRecipe {
  /** Debian suite, for example `bookworm`. */
  suite: string;
  /** Every Debian package installed (base packages, the parent's and the template's own), sorted and unique. */
  packages: string[];
  /** Parent template id, or null for a base template. */
  parentId: string | null;
  /** Shell commands run in order inside a gVisor sandbox: the parent's, then the template's own. */
  run: string[];
}

/** A template on disk. */
export interface BuiltTemplate extends TemplateRef {
  /** Disk usage of the root filesystem in bytes. */
  sizeBytes: number;
  recipe: TemplateRecipe;
  /** When the build finished (ISO-8601). */
  builtAt: string;
}

/** Options of {@link buildTemplate}. */
export interface BuildTemplateOptions {
  /** Directory holding `<id>/rootfs` and `<id>/template.json` for every template. */
  templatesDir: string;
  /** Template to build on; its packages and commands are included. @default none (a base template) */
  parent?: { id: string; recipe: TemplateRecipe } | undefined;
  /** Extra Debian packages. */
  apt: string[];
  /** Shell commands run with `/bin/sh -c` inside a gVisor sandbox with host networking. */
  run: string[];
  /** Receives mmdebstrap's and the commands' output line by line. */
  onLog?: ((line: string) => void) | undefined;
  signal?: AbortSignal | undefined;
  /** Debian mirror URL; not part of the template id. @default 'http://deb.debian.org/debian' */
  mirror?: string | undefined;
  /** runsc binary used for `run` commands. @default 'runsc' */
  runscPath?: string | undefined;
}

const TEMPLATE_FILE = 'template.json';
const LOCK_POLL_MS = 500;

/** The recipe of a template built from `parent` plus `apt` packages and `run` commands. */
export function templateRecipe(options: Pick<BuildTemplateOptions, 'parent' | 'apt' | 'run'>): TemplateRecipe {
  const parentPackages = options.parent?.recipe.packages ?? [];
  const packages = [...new Set([...BASE_PACKAGES, ...parentPackages, ...options.apt])].sort();
  return {
    suite: options.parent?.recipe.suite ?? TEMPLATE_SUITE,
    packages,
    parentId: options.parent?.id ?? null,
    run: [...(options.parent?.recipe.run ?? []), ...options.run],
  };
}

/** Content address of a recipe: sha256 hex of its canonical JSON (fixed key order) and the root's dpkg options. */
export function templateId(recipe: TemplateRecipe): string {
  const canonical = JSON.stringify({
    suite: recipe.suite,
    packages: [...recipe.packages].sort(),
    parentId: recipe.parentId,
    run: recipe.run,
    dpkg: ROOTFS_DPKG_OPTIONS,
  });
  return createHash('sha256').update(canonical).digest('hex');
}

/** Where template `id` lives under `templatesDir` (whether or not it exists). */
export function templateRef(templatesDir: string, id: string): TemplateRef {
  return { id, rootfsDir: join(templatesDir, id, 'rootfs') };
}

/**
 * Read a complete template from disk.
 * @returns the template, or null when it is not (completely) built
 */
export async function readTemplate(templatesDir: string, id: string): Promise<BuiltTemplate | null> {
  if (!/^[0-9a-f]{64}$/.test(id)) return null;
  let text: string;
  try {
    text = await readFile(join(templatesDir, id, TEMPLATE_FILE), 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw error;
  }
  const meta = JSON.parse(text) as { recipe: TemplateRecipe; sizeBytes: number; builtAt: string };
  return { ...templateRef(templatesDir, id), recipe: meta.recipe, sizeBytes: meta.sizeBytes, builtAt: meta.builtAt };
}

/** Remove a template's files. Sandboxes still using it as their lower layer must be gone first. Idempotent. */
export async function removeTemplate(templatesDir: string, id: string): Promise<void> {
  if (!/^[0-9a-f]{64}$/.test(id)) throw new RangeError(`not a template id: ${id}`);
  const trash = join(templatesDir, `.trash-${id}-${randomBytes(4).toString('hex')}`);
  try {
    await rename(join(templatesDir, id), trash);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw error;
  }
  await rm(trash, { recursive: true, force: true });
}

/**
 * Build a template, or return it at once when a template with the same recipe exists (cache hit).
 * Base templates come from mmdebstrap; derived ones are rebuilt from the combined package list, then each
 * `run` command runs inside a gVisor sandbox over the new root filesystem. The result appears atomically
 * (rename); concurrent builds of the same id wait for one another; a failed build leaves nothing behind.
 * @returns the template
 * @throws RuntimeError when mmdebstrap or a `run` command fails (details: the output's tail)
 * @example
 * const base = await buildTemplate({ templatesDir: '/var/lib/burrow/templates', apt: [], run: [] });
 */
export async function buildTemplate(options: BuildTemplateOptions): Promise<BuiltTemplate> {
  const recipe = templateRecipe(options);
  const id = templateId(recipe);
  const { templatesDir } = options;
  const existing = await readTemplate(templatesDir, id);
  if (existing) return existing;
  await mkdir(templatesDir, { recursive: true });
  const release = await acquireLock(join(templatesDir, `.lock-${id}`), options.signal);
  try {
    const raced = await readTemplate(templatesDir, id);
    if (raced) return raced;
    const workDir = join(templatesDir, `.tmp-${id}-${randomBytes(4).toString('hex')}`);
    try {
      await mkdir(workDir);
      const rootfsDir = join(workDir, 'rootfs');
      await debootstrap(rootfsDir, recipe, options);
      for (const command of recipe.run) await runInSandbox(rootfsDir, command, options);
      const sizeBytes = await diskUsageBytes(rootfsDir);
      const builtAt = new Date().toISOString();
      await writeFile(join(workDir, TEMPLATE_FILE), `${JSON.stringify({ id, recipe, sizeBytes, builtAt }, null, 2)}\n`);
      await rename(workDir, join(templatesDir, id));
      return { ...templateRef(templatesDir, id), recipe, sizeBytes, builtAt };
    } catch (error) {
      await rm(workDir, { recursive: true, force: true });
      throw error;
    }
  } finally {
    await release();
  }
}

async function debootstrap(rootfsDir: string, recipe: TemplateRecipe, options: BuildTemplateOptions): Promise<void> {
  const args = [
    '--variant=minbase',
    `--include=${recipe.packages.join(',')}`,
    ...ROOTFS_DPKG_OPTIONS.map((option) => `--dpkgopt=${option}`),
    '--customize-hook=rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*',
    recipe.suite,
    rootfsDir,
    options.mirror ?? 'http://deb.debian.org/debian',
  ];
  const result = await runCommand('mmdebstrap', args, { signal: options.signal, onLine: options.onLog });
  if (result.exitCode !== 0) {
    throw new RuntimeError(`mmdebstrap failed (exit ${result.exitCode ?? result.signal})`, tail(result.stderr, 40));
  }
}

/** Run one build command with `/bin/sh -c` inside a throwaway gVisor sandbox whose root is `rootfsDir`. */
async function runInSandbox(rootfsDir: string, command: string, options: BuildTemplateOptions): Promise<void> {
  const containerId = `bld_${randomBytes(10).toString('hex')}`;
  const bundleDir = join(rootfsDir, '..', `bundle-${containerId}`);
  const stateDir = join(rootfsDir, '..', 'runsc-state');
  await mkdir(bundleDir, { recursive: true });
  const spec = buildOciSpec({
    rootPath: rootfsDir,
    hostname: 'build',
    args: ['/bin/sh', '-c', command],
    env: { DEBIAN_FRONTEND: 'noninteractive' },
    mounts: [{ source: '/etc/resolv.conf', destination: '/etc/resolv.conf', readonly: true }],
  });
  await writeFile(join(bundleDir, 'config.json'), JSON.stringify(spec));
  const flags = ['--root', stateDir, '--network=host', '--overlay2=none'];
  options.onLog?.(`$ ${command}`);
  try {
    const result = await runCommand(
      options.runscPath ?? 'runsc',
      [...flags, 'run', '--bundle', bundleDir, containerId],
      { signal: options.signal, onLine: options.onLog },
    );
    if (result.exitCode !== 0) {
      throw new RuntimeError(
        `template command failed (exit ${result.exitCode ?? result.signal}): ${command}`,
        tail(`${result.stdout}\n${result.stderr}`, 40),
      );
    }
  } finally {
    await runCommand(options.runscPath ?? 'runsc', [...flags, 'delete', '-force', containerId]).catch(() => undefined);
    await rm(bundleDir, { recursive: true, force: true });
    await rm(stateDir, { recursive: true, force: true });
  }
}

async function diskUsageBytes(dir: string): Promise<number> {
  const result = await runCommand('du', ['-s', '--block-size=1', dir]);
  const bytes = Number.parseInt(result.stdout, 10);
  if (result.exitCode !== 0 || !Number.isFinite(bytes)) throw new RuntimeError('du failed', result.stderr);
  return bytes;
}

/** Exclusive lock file holding the owner's pid; a lock whose owner died is taken over. */
async function acquireLock(lockPath: string, signal: AbortSignal | undefined): Promise<() => Promise<void>> {
  for (;;) {
    if (signal?.aborted) throw abortError(signal);
    try {
      const handle = await open(lockPath, fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_WRONLY);
      await handle.writeFile(String(process.pid));
      await handle.close();
      return () => rm(lockPath, { force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const owner = Number.parseInt(await readFile(lockPath, 'utf8').catch(() => ''), 10);
    if (Number.isInteger(owner) && owner > 0 && !processAlive(owner)) {
      const age = await stat(lockPath).then(
        (s) => Date.now() - s.mtimeMs,
        () => 0,
      );
      if (age > 1000) await rm(lockPath, { force: true });
    }
    await new Promise((resolve) => setTimeout(resolve, LOCK_POLL_MS));
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** True when `path` exists. */
export async function pathExists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}
