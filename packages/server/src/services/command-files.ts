import type { CommandInfo } from '@burrow/contract';
import { ErrorCode } from '@burrow/contract';
import type { SandboxFs } from '@burrow/runtime';
import { z } from 'zod';
import { ApiError } from '../util/api-error.js';
import { COMMANDS_DIR } from './supervisor-script.js';

/**
 * The files of a supervised command in `/.burrow/commands/<id>/` (docs/exec-protocol.md §3), as the server reads
 * them through {@link SandboxFs}.
 */

// The files are written inside the sandbox, so they are parsed as untrusted input.
export const SpecFileSchema = z.object({
  argv: z.array(z.string()),
  pty: z.object({ cols: z.number(), rows: z.number() }).nullable(),
  createdAtMs: z.number(),
});
export const StateFileSchema = z.object({
  pid: z.number().int().min(2),
  startedAtMs: z.number(),
  supervisorPid: z.number().int().min(2).optional(),
});
export const ExitFileSchema = z.object({
  exitCode: z.number().int().min(0).max(255).nullable(),
  signal: z.string().max(32).nullable(),
  timedOut: z.boolean(),
  endedAtMs: z.number(),
});
export type SpecFile = z.infer<typeof SpecFileSchema>;
export type StateFile = z.infer<typeof StateFileSchema>;
export type ExitFile = z.infer<typeof ExitFileSchema>;

/** Sandbox path of one command's directory. */
export function commandDir(commandId: string): string {
  return `${COMMANDS_DIR}/${commandId}`;
}

/** Read a command's exit file, or null while it runs. */
export async function readExit(
  fs: SandboxFs,
  commandId: string,
): Promise<{ exitCode: number | null; signal: string | null; timedOut: boolean } | null> {
  const exit = await readJson(fs, `${commandDir(commandId)}/exit.json`, ExitFileSchema).catch(() => null);
  return exit === null ? null : exitFields(exit);
}

export function exitFields(exit: ExitFile): {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  endedAt: string;
} {
  return {
    exitCode: exit.exitCode,
    signal: exit.signal,
    timedOut: exit.timedOut,
    endedAt: new Date(exit.endedAtMs).toISOString(),
  };
}

export function toInfo(
  sandboxId: string,
  commandId: string,
  spec: SpecFile,
  state: StateFile | null,
  exit: ExitFile | null,
  bounds: { firstOffset: number; endOffset: number },
): CommandInfo {
  const base = {
    commandId,
    sandboxId,
    pid: state?.pid ?? 0,
    argv: spec.argv,
    pty: spec.pty !== null,
    startedAt: new Date(state?.startedAtMs ?? spec.createdAtMs).toISOString(),
    ...bounds,
  };
  if (exit !== null) return { ...base, status: 'exited', ...exitFields(exit) };
  return {
    ...base,
    status: state === null ? 'lost' : 'running',
    exitCode: null,
    signal: null,
    timedOut: false,
    endedAt: null,
  };
}

export function commandNotFound(commandId: string): ApiError {
  return new ApiError(ErrorCode.commandNotFound, `no command ${commandId} in this sandbox`, {
    hint: 'list the commands with GET /v1/sandboxes/{id}/commands (`burrow ps ID`)',
  });
}

export async function readBytes(fs: SandboxFs, path: string, maxBytes = 1024 * 1024): Promise<Buffer> {
  const handle = await fs.openFile(path);
  try {
    const size = Math.min((await handle.stat()).size, maxBytes);
    const buffer = Buffer.alloc(size);
    const { bytesRead } = await handle.read(buffer, 0, size, 0);
    return buffer.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}

export async function readJson<T>(fs: SandboxFs, path: string, schema: z.ZodType<T>): Promise<T> {
  return schema.parse(JSON.parse((await readBytes(fs, path)).toString('utf8')));
}
