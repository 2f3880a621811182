import { CheckpointBlockedError, type CheckpointBlocker } from '@burrow/runtime';
import { tail } from './run-command.js';
import type { RunscCli } from './runsc-cli.js';

/**
 * A checkpoint failed because a process in the sandbox holds a connection to a host Unix socket: gVisor cannot
 * save one. The sandbox keeps running. The exec agent's own connections are dropped before every checkpoint, so
 * this is a race with the agent reconnecting or a sandbox process that connected to the agent's socket itself.
 */
export class HostSocketOpenError extends CheckpointBlockedError {}

/**
 * A checkpoint failed because a process in the sandbox keeps a deleted file open, or works in a deleted directory,
 * on a file system served by the gofer (the disk): runsc 0.0~20240729 saves no deleted gofer file
 * (docs/adr/0005). Files under `/tmp` (gVisor's own tmpfs) are saved. The sandbox keeps running.
 */
export class DeletedFileOpenError extends CheckpointBlockedError {}

/** gVisor's save panic on a deleted gofer file or directory; the name is the entry's last component only. */
const DELETED_DENTRY = /gofer\.dentry\("([^"]*)"\)\.beforeSave: deleted and invalidated dentries can't be restored/;
/** gVisor's save panic on the endpoint of a host Unix socket connection (measured). */
const HOST_SOCKET = 'SCMConnectedEndpoint';

/**
 * The refusal a failed `runsc checkpoint` of `sandboxId` stands for, read from its stderr (which carries the
 * sentry's "Save failed: …" panic); null for any other failure. A {@link DeletedFileOpenError} returned here names
 * only the entry; {@link explainBlockers} adds who holds it once the sandbox runs again.
 */
export function checkpointRefusal(sandboxId: string, stderr: string): CheckpointBlockedError | null {
  if (stderr.includes(HOST_SOCKET)) {
    return new HostSocketOpenError(
      `checkpoint of ${sandboxId} refused: a process in it holds a connection to a host socket (such as ` +
        '/.burrow-agent/agent.sock), which gVisor cannot save; it keeps running. End that connection and retry',
      'host_socket_open',
      [],
      tail(stderr, 10),
    );
  }
  const deleted = DELETED_DENTRY.exec(stderr);
  if (deleted === null) return null;
  const name = deleted[1] ?? '';
  return new DeletedFileOpenError(deletedMessage(sandboxId, [], name), 'deleted_file_open', [], name);
}

/**
 * `error` with the processes that hold deleted files named, when it is a {@link DeletedFileOpenError}; any other
 * error as it is. Runs one `runsc exec` (with CAP_SYS_PTRACE, to read other processes' cwd) in the sandbox, which
 * must run again; a scan that fails leaves the error as it is.
 */
export async function explainBlockers(runsc: RunscCli, sandboxId: string, error: unknown): Promise<unknown> {
  if (!(error instanceof DeletedFileOpenError) || error.blockers.length > 0) return error;
  const name = error.details ?? '';
  const result = await runsc
    .run(['exec', '--cap', 'CAP_SYS_PTRACE', sandboxId, '/bin/sh', '-c', SCAN_SCRIPT], { timeoutMs: 10_000 })
    .catch(() => null);
  if (result === null || result.exitCode !== 0) return error;
  // Every one found blocks a checkpoint, not only the one gVisor's panic named (the first it met).
  const blockers = parseScan(result.stdout);
  if (blockers.length === 0) return error;
  return new DeletedFileOpenError(deletedMessage(sandboxId, blockers, name), 'deleted_file_open', blockers, name);
}

/**
 * Prints `M<TAB>mount point<TAB>fs type` per mount, then `H<TAB>pid<TAB>link target<TAB>command` for each
 * working directory or open fd (of every process but itself) whose target is a deleted path.
 */
const SCAN_SCRIPT = [
  `while read -r _ m t _; do printf 'M\\t%s\\t%s\\n' "$m" "$t"; done < /proc/self/mounts`,
  'for p in /proc/[0-9]*; do',
  '  n=$(basename "$p"); [ "$n" = "$$" ] && continue',
  `  c=$(tr '\\0' ' ' < "$p/cmdline" 2>/dev/null | cut -c1-200)`,
  '  for l in "$p/cwd" "$p"/fd/*; do',
  '    t=$(readlink "$l" 2>/dev/null) || continue',
  `    case "$t" in /*' (deleted)') printf 'H\\t%s\\t%s\\t%s\\n' "$n" "$t" "$c";; esac`,
  '  done',
  'done',
].join('\n');

/** The deleted paths on gofer (disk) mounts out of {@link SCAN_SCRIPT}'s output; tmpfs ones are saved fine. */
function parseScan(stdout: string): CheckpointBlocker[] {
  const mounts: Array<{ point: string; type: string }> = [];
  const blockers: CheckpointBlocker[] = [];
  const seen = new Set<string>();
  for (const line of stdout.split('\n')) {
    const fields = line.split('\t');
    if (fields[0] === 'M' && fields.length >= 3) mounts.push({ point: fields[1] ?? '', type: fields[2] ?? '' });
    if (fields[0] !== 'H' || fields.length < 4) continue;
    const path = (fields[2] ?? '').replace(/ \(deleted\)$/, '');
    const mount = mounts
      .filter((m) => path === m.point || path.startsWith(m.point === '/' ? '/' : `${m.point}/`))
      .sort((a, b) => b.point.length - a.point.length)[0];
    if (mount === undefined || mount.type !== '9p') continue;
    const key = `${fields[1]} ${path}`;
    if (seen.has(key)) continue;
    seen.add(key);
    blockers.push({ pid: Number(fields[1]), command: (fields[3] ?? '').trim() || null, path });
  }
  return blockers;
}

function deletedMessage(sandboxId: string, blockers: readonly CheckpointBlocker[], name: string): string {
  const who =
    blockers.length === 0
      ? `a process in it holds the deleted file or directory "${name}"`
      : blockers
          .slice(0, 3)
          .map((b) => `process ${b.pid} (${b.command ?? 'unknown'}) holds the deleted ${b.path}`)
          .join('; ');
  return (
    `checkpoint of ${sandboxId} refused: ${who}; gVisor cannot save a deleted file or working directory outside ` +
    '/tmp, so it keeps running. Close that file or leave that directory (or keep temporary files in /tmp) and retry'
  );
}
