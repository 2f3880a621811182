import { rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { CheckpointBlocker } from '@burrow/runtime';
import { HostSocketOpenError } from './checkpoint-blockers.js';
import type { RunscCli } from './runsc-cli.js';

/**
 * Why a checkpoint could not be trusted: processes inside hold host file descriptors that no restore can give back.
 *
 * gVisor imports the stdio of a `runsc exec` as host file descriptors (links `host:[n]` in `/proc/<pid>/fd`). A
 * checkpoint saves them without complaint, and every restore of that image then fails in `initFromOptions` with
 * "bad file number" (`HostConnectedEndpoint.afterLoad`): the host descriptor is gone. The only descriptors a restore
 * gives back are the init's own stdio, which `runsc restore` hands over again. So a process other than the init
 * that holds any other host descriptor (a background child of a `runsc exec` that kept its output, for example
 * `sh -c 'sleep 3600 &'`) makes the image unrestorable.
 */
export interface HostFdHolder {
  /** The process id inside the sandbox. */
  pid: number;
  /** Its command name (`/proc/<pid>/comm`), or '' when it exited during the scan. */
  command: string;
  /** Its file descriptors that are host descriptors (`host:[n]`), as `<fd> -> host:[n]`. */
  fds: string[];
}

/** File in a sandbox's host dir that says a `runsc exec` ran in its current container (see {@link markRunscExec}). */
const MARKER = 'runsc-exec-ran';

/**
 * Scanner run with `runsc exec`: the shell gives its own stdio up at once (so it holds no host descriptor), keeps
 * the exec's stdout as fd 3 for its report, lists every process's descriptors with one `ls` and names each process
 * with the `read` builtin. Lines: `self <shell pid> <ls pid>`, then `ls -l` output of `/proc/<pid>/fd/` sections,
 * then `comm <pid> <name>` lines. Only fd 3 of the shell and of `ls` is a host descriptor of the scan itself.
 */
const SCAN_SCRIPT = [
  'exec 3>&1 </dev/null >/dev/null 2>&1',
  'ls -l /proc/[0-9]*/fd/ >&3 2>/dev/null & l=$!',
  'echo "self $$ $l" >&3',
  'wait $l',
  'echo end-of-fds >&3',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: shell parameter expansion, not a template
  'for d in /proc/[0-9]*; do p=${d#/proc/}; c=; read -r c < "$d/comm" 2>/dev/null; echo "comm $p $c" >&3; done',
].join('\n');

/**
 * Record that a `runsc exec` started in `sandboxDir`'s container, so that its next checkpoint scans for host
 * descriptors first ({@link assertNoHostFds}). A file, so that a server restart still knows.
 */
export async function markRunscExec(sandboxDir: string): Promise<void> {
  await writeFile(join(sandboxDir, MARKER), '');
}

/** Forget the mark: a new container (create or restore) holds no `runsc exec` descriptor, or a scan found none. */
export async function clearRunscExecMark(sandboxDir: string): Promise<void> {
  await rm(join(sandboxDir, MARKER), { force: true });
}

/**
 * Parse the scanner's report into the processes that hold a host descriptor the restore cannot give back: any
 * `host:[n]` link of a process that is not the init (pid 1), not the scan itself, and not one of the init's own.
 * @param report the scanner's stdout
 */
export function parseHostFdReport(report: string): HostFdHolder[] {
  const lines = report.split('\n');
  const scanPids = new Set<number>();
  const hostFds = new Map<number, string[]>();
  const commands = new Map<number, string>();
  let pid: number | null = null;
  let inFds = true;
  for (const line of lines) {
    const self = /^self (\d+) (\d+)$/.exec(line);
    if (self) {
      scanPids.add(Number(self[1])).add(Number(self[2]));
      continue;
    }
    if (line === 'end-of-fds') {
      inFds = false;
      continue;
    }
    if (!inFds) {
      const comm = /^comm (\d+) ?(.*)$/.exec(line);
      if (comm) commands.set(Number(comm[1]), comm[2] ?? '');
      continue;
    }
    const section = /^\/proc\/(\d+)\/fd\/?:$/.exec(line);
    if (section) {
      pid = Number(section[1]);
      continue;
    }
    const link = /\s(\d+) -> (host:\[\d+\])$/.exec(line);
    if (link && pid !== null) hostFds.set(pid, [...(hostFds.get(pid) ?? []), `${link[1]} -> ${link[2]}`]);
  }
  const initTargets = new Set((hostFds.get(1) ?? []).map((fd) => fd.split(' -> ')[1]));
  const holders: HostFdHolder[] = [];
  for (const [holderPid, fds] of hostFds) {
    if (holderPid === 1 || scanPids.has(holderPid)) continue;
    const foreign = fds.filter((fd) => !initTargets.has(fd.split(' -> ')[1]));
    if (foreign.length > 0) holders.push({ pid: holderPid, command: commands.get(holderPid) ?? '', fds: foreign });
  }
  return holders.sort((a, b) => a.pid - b.pid);
}

/**
 * Refuse to checkpoint a sandbox whose image could not be restored: when a `runsc exec` ran in its current container
 * (the mark of {@link markRunscExec}), list the processes holding host descriptors and throw if there is any. A
 * sandbox without the mark is not scanned: its processes came from the init and the exec agent, which hand out no
 * host descriptor. A clean scan clears the mark.
 * @throws HostSocketOpenError naming each process, its command and descriptors (`details.blockers` on the API), or
 *   with no blocker named when the scan itself cannot run (the image could not be verified)
 */
export async function assertNoHostFds(runsc: RunscCli, sandboxId: string, sandboxDir: string): Promise<void> {
  if ((await stat(join(sandboxDir, MARKER)).catch(() => null)) === null) return;
  const result = await runsc.run(['exec', sandboxId, '/bin/sh', '-c', SCAN_SCRIPT], { timeoutMs: 30_000 });
  const report = result.stdout.toString();
  if (result.exitCode !== 0 || !report.includes('end-of-fds')) {
    throw new HostSocketOpenError(
      `checkpoint of ${sandboxId} refused: a command ran in it outside the exec agent, and checking that none of ` +
        `its processes still holds that command's output failed (exit ${result.exitCode ?? result.signal}); it ` +
        'keeps running. Stop and start it (its files are kept) to clear this',
      'host_socket_open',
      [],
      result.stderr.toString(),
    );
  }
  const holders = parseHostFdReport(report);
  if (holders.length === 0) {
    await clearRunscExecMark(sandboxDir);
    return;
  }
  const blockers: CheckpointBlocker[] = holders.flatMap((h) =>
    h.fds.map((fd) => ({ pid: h.pid, command: h.command || null, path: `fd ${fd}` })),
  );
  const named = holders.map((h) => `pid ${h.pid} (${h.command || '?'}: fd ${h.fds.join(', ')})`).join('; ');
  throw new HostSocketOpenError(
    `checkpoint of ${sandboxId} refused: ${named} still hold the output of a command that ran outside the exec ` +
      'agent, which no restore can give back; it keeps running. End those processes, or start long-running ones ' +
      'as background commands or with their output redirected (cmd >/dev/null 2>&1 &), and retry',
    'host_socket_open',
    blockers,
  );
}
