import { type RuntimeDriver, SandboxFs } from '@burrow/runtime';
import type { Clock } from '../util/clock.js';
import { commandDir, readExit } from './command-files.js';
import { type LogChunk, LogCursor } from './command-log-reader.js';
import type { SandboxService } from './sandbox-service.js';

/** How often a follow looks at a detached command's files, and whether its sandbox runs again, in ms. */
const FOLLOW_POLL_MS = 100;

/** How a detached command ended, from its exit file. */
export interface DetachedExit {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
}

/**
 * Follow a command that a pause, fork or memory snapshot detached from its exec (`ProcessExit.detached`) to its
 * end: while the sandbox runs, hand its output from `offset` on to `onOutput` (the log written inside the sandbox,
 * read through {@link SandboxFs}), and resolve with its exit once its exit file is there and every byte before it
 * was handed on. A paused sandbox is waited for, never resumed.
 * @throws ApiError `sandbox_not_found` when the sandbox is deleted meanwhile
 */
export async function followDetached(
  deps: { sandboxes: SandboxService; driver: RuntimeDriver; clock: Clock },
  tenantId: string,
  sandboxId: string,
  detached: { commandId: string; offset: number },
  onOutput: (chunk: LogChunk) => void,
  signal?: AbortSignal,
): Promise<DetachedExit> {
  const fs = new SandboxFs(deps.driver.rootDir(sandboxId));
  const cursor = new LogCursor(fs, `${commandDir(detached.commandId)}/log`, detached.offset);
  while (signal?.aborted !== true) {
    const record = await deps.sandboxes.require(tenantId, sandboxId);
    if (record.state === 'running') {
      // The exit file is written after the last output: output read after seeing it is complete.
      const exit = await readExit(fs, detached.commandId).catch(() => null);
      const drained = await drain(cursor, onOutput).catch(() => false);
      if (exit !== null && drained) return exit;
    }
    await new Promise((resolve) => setTimeout(resolve, FOLLOW_POLL_MS));
  }
  throw signal.reason ?? new Error('aborted');
}

/** Hand on every complete record the log holds now; false when it could not be read (the sandbox paused). */
async function drain(cursor: LogCursor, onOutput: (chunk: LogChunk) => void): Promise<boolean> {
  for (;;) {
    const read = await cursor.next();
    if (read.chunks.length === 0) return true;
    for (const chunk of read.chunks) onOutput(chunk);
  }
}
