import { z } from 'zod';
import { Base64Schema } from './base64.js';
import { EnvSchema, SandboxPathSchema } from './common.js';

export { ExecChannel } from './exec-channel.js';
export * from './exec-frames.js';

/** Largest `timeoutMs` of one command: 86_400_000 (24 hours). */
export const MAX_EXEC_TIMEOUT_MS = 86_400_000;
/** Default `timeoutMs` of one command: 60_000 (1 minute). */
export const DEFAULT_EXEC_TIMEOUT_MS = 60_000;
/** Bytes of stdout and of stderr each that the non-streaming exec keeps: 16 MiB. Beyond it, `truncated` is true. */
export const EXEC_OUTPUT_CAP_BYTES = 16 * 1024 * 1024;

/**
 * A command: an argv array (run as is) or a shell string (run with `/bin/sh -c`).
 * argv entries may not contain NUL bytes.
 */
export const CommandSchema = z.union([
  z
    .array(
      z
        .string()
        .max(131_072)
        .refine((a) => !a.includes('\0'), 'arguments may not contain NUL bytes'),
    )
    .min(1, 'argv needs at least the program')
    .max(4096),
  z
    .string()
    .min(1, 'the shell command is empty')
    .max(131_072)
    .refine((a) => !a.includes('\0'), 'the command may not contain NUL bytes'),
]);

/** Signals a client may send to a command's process group. */
export const SignalNameSchema = z.enum(['SIGINT', 'SIGTERM', 'SIGKILL', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2']);
export type SignalName = z.infer<typeof SignalNameSchema>;

/** A user inside the sandbox: a name from its `/etc/passwd` or a numeric uid. */
export const UserSchema = z
  .string()
  .regex(/^([a-z_][a-z0-9_-]{0,31}\$?|\d{1,10})$/, 'a user name (a-z, 0-9, _ and -) or a numeric uid');

/** Most bytes of argv plus env of one command: 1 MiB (the host's ARG_MAX is 2 MiB for everything together). */
export const MAX_COMMAND_BYTES = 1024 * 1024;

/** UTF-8 bytes of a command's argv (or shell string) and env entries, each counted with its terminator. */
function commandBytes(cmd: string | string[], env: Record<string, string>): number {
  const args = typeof cmd === 'string' ? [cmd] : cmd;
  let total = 0;
  for (const a of args) total += Buffer.byteLength(a) + 1;
  for (const [k, v] of Object.entries(env)) total += Buffer.byteLength(k) + Buffer.byteLength(v) + 2;
  return total;
}

/** Body of `POST /v1/sandboxes/{id}/exec`, and of the `start` frame of the streaming form. */
export const ExecRequestSchema = z
  .object({
    cmd: CommandSchema,
    /** Added to the sandbox's env for this command. */
    env: EnvSchema.default({}),
    /** Working directory. @default the sandbox's cwd */
    cwd: SandboxPathSchema.optional(),
    /** User (name or uid) the command runs as. @default the sandbox's user (root) */
    user: UserSchema.optional(),
    /** Kill the command's process group after this many ms (1 ms to 24 h). @default 60_000 (1 minute) */
    timeoutMs: z.number().int().min(1).max(MAX_EXEC_TIMEOUT_MS).default(DEFAULT_EXEC_TIMEOUT_MS),
    /** Bytes for the command's stdin, base64 ({@link Base64Schema}); stdin is closed after them. @default empty */
    stdin: Base64Schema.max(14_000_000).optional(),
  })
  .strict()
  .refine((r) => commandBytes(r.cmd, r.env) <= MAX_COMMAND_BYTES, {
    message: 'the command and its env may total at most 1 MiB; pass large data through stdin or a file',
    path: ['cmd'],
  })
  .meta({ id: 'ExecRequest' });
export type ExecRequest = z.input<typeof ExecRequestSchema>;

/**
 * Why a command ended when neither it nor its `timeoutMs` ended it:
 * - `oom_killed`: the sandbox reached its memory limit while the command ran, and the command ended as a process
 *   killed for memory does (gVisor reports such a process as exit 1; it is reported as `SIGKILL`).
 * - `sandbox_checkpoint`: a pause, fork or memory snapshot of the sandbox ended it. Only a command started without the
 *   exec agent (`runsc exec`) ends so; through the agent a command goes on (the `paused` stream frame). Reported as
 *   `SIGKILL`, whatever the command saw.
 */
export const ExitReasonSchema = z.enum(['oom_killed', 'sandbox_checkpoint']).meta({ id: 'ExitReason' });
export type ExitReason = z.infer<typeof ExitReasonSchema>;

/** How a command ended. Exactly one of `exitCode` and `signal` is non-null. */
export const ExitInfoSchema = z.object({
  /** 0-255, or null when a signal ended the command. */
  exitCode: z.number().int().min(0).max(255).nullable(),
  /** Signal name (`SIGKILL`), or null when the command exited. */
  signal: z.string().nullable(),
  /** True when the command ran past `timeoutMs` and was killed. */
  timedOut: z.boolean(),
  /** Why it ended when something else than the command or its timeout ended it ({@link ExitReasonSchema}), else null. */
  reason: ExitReasonSchema.nullable().default(null),
  /** Wall time from start to exit, ms. */
  durationMs: z.number(),
});
export type ExitInfo = z.infer<typeof ExitInfoSchema>;

/** Response of `POST /v1/sandboxes/{id}/exec`. Output is bytes, base64 on the wire. */
export const ExecResultSchema = ExitInfoSchema.extend({
  stdout: z.base64(),
  stderr: z.base64(),
  /** True when stdout or stderr went past {@link EXEC_OUTPUT_CAP_BYTES} and the rest was dropped. */
  truncated: z.boolean(),
}).meta({ id: 'ExecResult' });
export type ExecResult = z.infer<typeof ExecResultSchema>;

/**
 * An exec answer as a client checks it: stdout and stderr as plain strings, which the client decodes strictly itself
 * (`z.base64()` runs a regex and `atob` over the output: ~9 ms per MiB).
 */
export const ExecAnswerSchema = ExecResultSchema.extend({ stdout: z.string(), stderr: z.string() });

/** Client frames of the streaming exec WebSocket ({@link ExecChannel} describes the binary ones). */
export const ExecClientFrameSchema = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('start'),
    request: ExecRequestSchema,
    /** Kill the command's process group when the socket closes before it exits. @default false (it runs on, to its timeout) */
    killOnDisconnect: z.boolean().default(false),
  }),
  z.object({ type: z.literal('stdin_close') }),
  z.object({ type: z.literal('signal'), signal: SignalNameSchema }),
]);
export type ExecClientFrame = z.infer<typeof ExecClientFrameSchema>;

export const ExecServerFrameSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('started') }),
  ExitInfoSchema.extend({ type: z.literal('exit') }),
  /**
   * Last frame when the sandbox paused, forked or was snapshotted with memory while the command ran: the command
   * goes on inside the sandbox as command `commandId`, and its output continues at `offset` (bytes of stdout and
   * stderr sent on this stream). Reattach with `GET /v1/sandboxes/{id}/commands/{commandId}/stream?offset=` once the
   * sandbox runs again; the SDK and `burrow exec` do it themselves.
   */
  z.object({
    type: z.literal('paused'),
    commandId: z.string(),
    offset: z.number().int().min(0),
  }),
  z.object({
    type: z.literal('error'),
    error: z.object({ code: z.string(), message: z.string(), hint: z.string().optional(), requestId: z.string() }),
  }),
]);
export type ExecServerFrame = z.infer<typeof ExecServerFrameSchema>;
