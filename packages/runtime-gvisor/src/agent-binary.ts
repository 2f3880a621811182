import { createHash, randomBytes } from 'node:crypto';
import { link, mkdir, readFile, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runCommand } from './run-command.js';

/** C source of the in-sandbox exec agent, shipped with the package (never a prebuilt binary). */
export const AGENT_SOURCE_PATH = fileURLToPath(new URL('../agent/burrow-agent.c', import.meta.url));
/** Every file of the agent's source: compiled together into one static program, all hashed for its cache key. */
const AGENT_SOURCE_FILES = [
  'burrow-agent.c',
  'burrow-frames.c',
  'burrow-spawn.c',
  'burrow-command-files.c',
  'burrow-exec.c',
  'burrow-detach.c',
  'burrow-background.c',
  'burrow-supervise.c',
  'burrow-agent.h',
].map((name) => fileURLToPath(new URL(`../agent/${name}`, import.meta.url)));

/** Where the agent appears inside a sandbox (read-only bind mount of `<sandbox dir>/agent`). */
export const AGENT_GUEST_DIR = '/.burrow-agent';
/** The agent's program inside the sandbox. */
export const AGENT_GUEST_BINARY = `${AGENT_GUEST_DIR}/burrow-agent`;
/** Longest Unix socket path Linux accepts (`sun_path` is 108 bytes with the NUL). */
export const MAX_SOCKET_PATH_BYTES = 107;

/** A built agent, or why there is none (exec then falls back to `runsc exec`). */
export type AgentBuild = { kind: 'built'; path: string } | { kind: 'unavailable'; reason: string };

/**
 * Compile the agent with the host's `gcc -static` into `cacheDir/burrow-agent-<sha256 of source, 16 hex>` unless
 * that file exists. Content-addressed, so a binary a paused sandbox maps is never rewritten under it.
 * Never throws: a missing compiler gives `unavailable` with the reason.
 */
export async function buildAgent(cacheDir: string, gccPath = 'gcc'): Promise<AgentBuild> {
  const sources = await Promise.all(AGENT_SOURCE_FILES.map((file) => readFile(file).catch(() => null)));
  if (sources.some((source) => source === null))
    return { kind: 'unavailable', reason: `agent source not found beside ${AGENT_SOURCE_PATH}` };
  const hashing = createHash('sha256');
  for (const source of sources) hashing.update(source as Buffer);
  const hash = hashing.digest('hex').slice(0, 16);
  const path = join(cacheDir, `burrow-agent-${hash}`);
  if (await stat(path).catch(() => null)) return { kind: 'built', path };
  await mkdir(cacheDir, { recursive: true });
  const temp = `${path}.${randomBytes(4).toString('hex')}.tmp`;
  const result = await runCommand(
    gccPath,
    [
      '-static',
      '-O2',
      '-Wall',
      '-Wno-clobbered',
      '-o',
      temp,
      ...AGENT_SOURCE_FILES.filter((file) => file.endsWith('.c')),
    ],
    { timeoutMs: 120_000 },
  ).catch((error: unknown) => ({ exitCode: null, signal: null, stdout: '', stderr: String(error) }));
  if (result.exitCode !== 0) {
    await rm(temp, { force: true });
    return {
      kind: 'unavailable',
      reason: `building the exec agent with ${gccPath} -static failed (install gcc and libc6-dev: scripts/install-deps.sh): ${result.stderr.trim().slice(-400)}`,
    };
  }
  await rename(temp, path);
  return { kind: 'built', path };
}

/**
 * Put the agent into a sandbox's agent dir as `burrow-agent` (a hard link to the cached build; a copy across
 * file systems). An existing one is kept: a paused sandbox's agent must stay the binary its image maps.
 */
export async function installAgent(build: AgentBuild, agentDir: string): Promise<void> {
  await mkdir(agentDir, { recursive: true, mode: 0o755 });
  if (build.kind !== 'built') return;
  const target = join(agentDir, 'burrow-agent');
  if (await stat(target).catch(() => null)) return;
  await link(build.path, target).catch(async () => {
    const data = await readFile(build.path);
    const { writeFile } = await import('node:fs/promises');
    await writeFile(target, data, { mode: 0o755 });
  });
}
