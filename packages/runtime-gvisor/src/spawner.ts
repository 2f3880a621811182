import { RuntimeError, type SpawnOptions } from '@burrow/runtime';
import { AGENT_GUEST_BINARY } from './agent-binary.js';

/** FIFO inside the sandbox (on gVisor's own /dev tmpfs) that the init-side spawner reads requests from. */
export const SPAWN_FIFO = '/dev/.burrow-spawn';
/** File the spawner makes once its FIFO is open: without the FIFO then, something inside removed it. */
export const SPAWN_READY_MARK = `${SPAWN_FIFO}.ready`;
/** Exit status of a spawn request that found the spawner up and its FIFO gone. */
export const SPAWN_FIFO_GONE_EXIT = 3;

/**
 * The container's init command under tini: a shell that starts each line written to {@link SPAWN_FIFO} as a
 * detached session. gVisor kills every process descended from `runsc exec` when it restores an image (their
 * caller is gone), so processes that must survive pause, resume and fork are started from the init's tree.
 */
export const SPAWNER_ARGV = [
  '/bin/sh',
  '-c',
  // The exec agent (docs/adr/0003) runs from the init too, restarted if it ends.
  `a=${AGENT_GUEST_BINARY}; if [ -x $a ]; then (while :; do $a; sleep 1; done) </dev/null >/dev/null 2>&1 & fi; ` +
    // The FIFO is held open read-write (fd 3) for the spawner's life. Reopening it after each writer's EOF loses
    // requests: a writer that opens it while the old read end is still open has its line dropped with that pipe
    // when the read end closes (the server then never starts; the "rare hang" of issue 3).
    `f=${SPAWN_FIFO}; rm -f $f ${SPAWN_READY_MARK}; mkfifo -m 600 $f; exec 3<>$f; : > ${SPAWN_READY_MARK}; ` +
    'while IFS= read -r line <&3; do ' +
    'setsid /bin/sh -c "$line" </dev/null >/dev/null 2>&1 3>&- & done',
];

/** How long a spawn request waits for the spawner's FIFO to appear (a request right after create), in ms. */
export const SPAWNER_READY_TIMEOUT_MS = 10_000;

/**
 * The argv (run with `runsc exec`) that asks the spawner to start `options.argv` in `cwd` with exactly `env`.
 * The request waits (at most {@link SPAWNER_READY_TIMEOUT_MS}) until the FIFO exists and writes only to a FIFO:
 * a request made right after create can run before the init has made it, and writing then would create a regular
 * file there; the init's `mkfifo` fails, its loop reads that file to its end and exits, and the whole sandbox
 * stops (the "cannot exec in sandbox" of the first exec after create; runsc-boot.log: the application exits 0
 * right after the spawn request, init.log: `mkfifo: ... File exists`). Once the spawner is up
 * ({@link SPAWN_READY_MARK} exists) a missing FIFO is no start-up race but a FIFO removed inside the sandbox:
 * the request exits {@link SPAWN_FIFO_GONE_EXIT} at once.
 */
export function spawnRequestArgv(options: SpawnOptions): string[] {
  const env = Object.entries(options.env).map(([k, v]) => shellQuote(`${k}=${v}`));
  const line = `cd ${shellQuote(options.cwd)} && exec env -i ${env.join(' ')} ${options.argv.map(shellQuote).join(' ')}`;
  if (line.includes('\n')) throw new RuntimeError('a spawned command may not contain a newline');
  const tries = Math.ceil(SPAWNER_READY_TIMEOUT_MS / 20);
  const script =
    `f=${SPAWN_FIFO}; i=0; while [ ! -p $f ]; do i=$((i+1)); ` +
    `if [ -e ${SPAWN_READY_MARK} ]; then echo "$f was removed inside the sandbox" >&2; exit ${SPAWN_FIFO_GONE_EXIT}; fi; ` +
    `if [ $i -gt ${tries} ]; then echo "the sandbox's spawner is not running ($f is not a FIFO)" >&2; exit 1; fi; ` +
    `sleep 0.02; done; printf '%s\\n' "$1" > $f`;
  return ['/bin/sh', '-c', script, 'spawn', line];
}

function shellQuote(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}
