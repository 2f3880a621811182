/**
 * TEST HOOK: named crash points for the kill -9 suite (tests/e2e/crash-recovery.test.ts). A point is a place in a
 * multi-step operation (pause, resume, fork) where a real crash would leave a half-done state: between a row write
 * and a runtime step, or between two runtime steps. {@link crashPoint} does nothing unless the server was started
 * with that exact point armed (`BURROW_TEST_CRASH_AT`, read in the server's main.ts only); then it ends the process
 * with SIGKILL on the spot, as `kill -9` would.
 */

let armed: string | null = null;

/**
 * Arm one crash point by name (for example `pause:after-checkpoint`), or none with null.
 * @param name the point whose {@link crashPoint} call kills this process
 */
export function armCrashPoint(name: string | null): void {
  armed = name === '' ? null : name;
}

/**
 * Kill this process with SIGKILL if `name` is the armed crash point; a no-op otherwise (always, in production).
 * @param name `<operation>:<where>`, for example `fork:after-first-child`
 */
export function crashPoint(name: string): void {
  if (armed !== null && armed === name) process.kill(process.pid, 'SIGKILL');
}
