import { z } from 'zod';
import {
  EnvSchema,
  ID_ALPHABET,
  ID_RANDOM_LENGTH,
  InstantSchema,
  SandboxIdSchema,
  SandboxPathSchema,
} from './common.js';
import { CommandSchema, MAX_EXEC_TIMEOUT_MS, SignalNameSchema, UserSchema } from './exec.js';

/** `cmd_` + 20 base32 characters: a background command inside one sandbox. */
export const CommandIdSchema = z
  .string()
  .regex(
    new RegExp(`^cmd_[${ID_ALPHABET}]{${ID_RANDOM_LENGTH}}$`),
    'must look like cmd_ followed by 20 base32 characters',
  );

/** Bytes of output each background command keeps on disk (a ring of segments): 16 MiB. Older output is dropped. */
export const COMMAND_LOG_CAP_BYTES = 16 * 1024 * 1024;

/** A pseudo-terminal for a command: its size in character cells and `TERM`. */
export const PtyOptionsSchema = z
  .object({
    /** Columns. @default 80 */
    cols: z.number().int().min(1).max(1000).default(80),
    /** Rows. @default 24 */
    rows: z.number().int().min(1).max(1000).default(24),
    /** `TERM` of the command. @default 'xterm-256color' */
    term: z
      .string()
      .regex(/^[A-Za-z0-9._+-]{1,64}$/, 'TERM uses letters, digits and . _ + -')
      .default('xterm-256color'),
  })
  .strict()
  .meta({ id: 'PtyOptions' });
export type PtyOptions = z.input<typeof PtyOptionsSchema>;

/** Body of `POST /v1/sandboxes/{id}/commands`: start a background command (optionally on a PTY). */
export const StartCommandRequestSchema = z
  .object({
    cmd: CommandSchema,
    /** Added to the sandbox's env for this command. */
    env: EnvSchema.default({}),
    /** Working directory. @default the sandbox's cwd */
    cwd: SandboxPathSchema.optional(),
    /** User (name or uid) the command runs as. @default the sandbox's user (root) */
    user: UserSchema.optional(),
    /** Kill the command's process group after this many ms (1 ms to 24 h). @default no limit */
    timeoutMs: z.number().int().min(1).max(MAX_EXEC_TIMEOUT_MS).optional(),
    /** Run on a pseudo-terminal (stdout and stderr merge into one stream). @default no PTY (pipes) */
    pty: PtyOptionsSchema.optional(),
  })
  .strict()
  .meta({ id: 'StartCommandRequest' });
export type StartCommandRequest = z.input<typeof StartCommandRequestSchema>;

/** A background command and what is known of it. */
export const CommandInfoSchema = z
  .object({
    commandId: CommandIdSchema,
    sandboxId: SandboxIdSchema,
    /** Process id inside the sandbox; also its process group and session id. */
    pid: z.number().int(),
    /** The argv that ran (a shell string shows as `/bin/sh -c …`). */
    argv: z.array(z.string()),
    pty: z.boolean(),
    /** `running`, `exited`, or `lost` (its supervisor is gone without an exit status, for example after a stop/start). */
    status: z.enum(['running', 'exited', 'lost']),
    /** Exit code once exited, else null. */
    exitCode: z.number().int().min(0).max(255).nullable(),
    /** Signal name once killed by one, else null. */
    signal: z.string().nullable(),
    /** True when `timeoutMs` ran out and the process group was killed (error code `exec_timeout`). */
    timedOut: z.boolean(),
    startedAt: InstantSchema,
    endedAt: InstantSchema.nullable(),
    /** Output offset of the oldest byte still kept (bytes before it were dropped from the ring). */
    firstOffset: z.number().int().min(0),
    /** Output offset after the newest byte: total bytes of stdout and stderr written so far. */
    endOffset: z.number().int().min(0),
  })
  .meta({ id: 'CommandInfo' });
export type CommandInfo = z.infer<typeof CommandInfoSchema>;

/** Response of `GET /v1/sandboxes/{id}/commands`. */
export const CommandListSchema = z.object({ commands: z.array(CommandInfoSchema) }).meta({ id: 'CommandList' });
export type CommandList = z.infer<typeof CommandListSchema>;

/** Path params of the routes of one command. */
export const CommandParamsSchema = z.object({ id: SandboxIdSchema, commandId: CommandIdSchema });

/** Body of `POST /v1/sandboxes/{id}/commands/{commandId}/kill`. */
export const KillCommandRequestSchema = z
  .object({
    /** Signal sent to the command's whole process group. @default 'SIGKILL' */
    signal: SignalNameSchema.default('SIGKILL'),
  })
  .strict()
  .meta({ id: 'KillCommandRequest' });
export type KillCommandRequest = z.input<typeof KillCommandRequestSchema>;

/** Query of `GET /v1/sandboxes/{id}/commands/{commandId}/wait`. */
export const WaitCommandQuerySchema = z
  .object({
    /** Longest wait, ms; the response then has `status: 'running'`. @default 30_000 (30 s), at most 300_000 */
    timeoutMs: z.coerce.number().int().min(0).max(300_000).default(30_000),
  })
  .strict();

/** Query of the attach stream `GET /v1/sandboxes/{id}/commands/{commandId}/stream`. */
export const AttachCommandQuerySchema = z
  .object({
    /** Output offset to start from (0 = the beginning; bytes already dropped are reported in `attached`). @default 0 */
    offset: z.coerce.number().int().min(0).default(0),
    /** Keep streaming new output until the command exits; `false` ends after the output written so far. @default true */
    follow: z
      .enum(['true', 'false'])
      .default('true')
      .transform((v) => v === 'true'),
  })
  .strict();

/**
 * Client frames of the attach stream. Binary frames `[0, ...bytes]` are stdin. Text frames are JSON:
 * `stdin_close`, `signal` (to the process group), `resize` (PTY only; the program gets SIGWINCH).
 */
export const CommandClientFrameSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('stdin_close') }),
  z.object({ type: z.literal('signal'), signal: SignalNameSchema }),
  z.object({
    type: z.literal('resize'),
    cols: z.number().int().min(1).max(1000),
    rows: z.number().int().min(1).max(1000),
  }),
]);
export type CommandClientFrame = z.infer<typeof CommandClientFrameSchema>;

/**
 * Server frames of the attach stream: `attached` first, then binary output `[1|2, ...bytes]`, and `exit` or
 * `error` last. Offsets count output bytes of both channels; reattach with `offset` = `attached.offset` plus the
 * payload bytes received.
 */
export const CommandServerFrameSchema = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('attached'),
    /** Offset of the first byte that follows. */
    offset: z.number().int().min(0),
    /** Bytes between the requested offset and `offset` that the ring had already dropped. */
    droppedBytes: z.number().int().min(0),
  }),
  z.object({
    type: z.literal('exit'),
    exitCode: z.number().int().min(0).max(255).nullable(),
    signal: z.string().nullable(),
    timedOut: z.boolean(),
    /** Offset after the last byte sent. */
    offset: z.number().int().min(0),
  }),
  z.object({
    type: z.literal('end'),
    /** `follow=false`: the output written so far was sent; the command still runs. Offset after the last byte sent. */
    offset: z.number().int().min(0),
  }),
  z.object({
    type: z.literal('error'),
    error: z.object({ code: z.string(), message: z.string(), hint: z.string().optional(), requestId: z.string() }),
  }),
]);
export type CommandServerFrame = z.infer<typeof CommandServerFrameSchema>;
