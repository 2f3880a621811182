/**
 * Input schemas of the MCP tools, composed from the contract's own zod schemas: a tool accepts what the API accepts
 * (ids, paths, commands, limits, policies), and its JSON Schema, which the MCP SDK derives from these, says so.
 */
import {
  CommandIdSchema,
  CommandSchema,
  CreateSandboxRequestSchema,
  CreateSnapshotRequestSchema,
  EnvSchema,
  ExecRequestSchema,
  ForkSandboxRequestSchema,
  LabelsSchema,
  ListFilesQuerySchema,
  PortUrlRequestSchema,
  SandboxIdSchema,
  SandboxPathSchema,
  SandboxStateSchema,
  StartCommandRequestSchema,
  UserSchema,
  WriteFileQuerySchema,
} from '@burrow/contract';
import { z } from 'zod';

const sandboxId = SandboxIdSchema.describe('The sandbox id (sbx_ followed by 20 characters).');

/** Text is UTF-8; base64 carries any bytes. */
const EncodingSchema = z
  .enum(['utf8', 'base64'])
  .default('utf8')
  .describe('How `content` is encoded: utf8 text (default) or base64 for binary data.');

/**
 * `create_sandbox`: the API's create request, field for field. A copy of its shape: the contract's schema carries an
 * OpenAPI id, which JSON Schema output turns into a `$ref` root, and MCP wants a plain object at the root.
 */
export const CreateSandboxInput = z.object(CreateSandboxRequestSchema.shape).strict();

/** `list_sandboxes`: filters and one page. */
export const ListSandboxesInput = z
  .object({
    state: SandboxStateSchema.optional().describe('Only sandboxes in this state (default: every state but deleted).'),
    labels: LabelsSchema.optional().describe('Only sandboxes carrying all these labels.'),
    limit: z.number().int().min(1).max(200).default(50).describe('Page size, 1-200.'),
    cursor: z.string().max(512).optional().describe('nextCursor of the previous page.'),
  })
  .strict();

/** Fields a foreground and a background command share, from the exec request. */
const commandFields = {
  sandboxId,
  cmd: CommandSchema.describe('A shell string (run with /bin/sh -c) or an argv array (run as is).'),
  cwd: SandboxPathSchema.optional().describe("Working directory (absolute); default the sandbox's cwd."),
  env: EnvSchema.optional().describe("Added to the sandbox's environment for this command."),
  user: UserSchema.optional().describe('User name or uid the command runs as; default root.'),
};

/** `run_command`: a command run to its end. */
export const RunCommandInput = z
  .object({
    ...commandFields,
    timeoutMs: ExecRequestSchema.shape.timeoutMs.describe(
      'Kill the command after this many ms (1 ms to 24 h); default 60000 (1 minute).',
    ),
    stdin: z.string().max(1_000_000).optional().describe('UTF-8 text for the command stdin, closed after it.'),
  })
  .strict();

/** `start_background_command`: a command that runs on after the call and survives pause, resume and fork. */
export const StartBackgroundCommandInput = z
  .object({
    ...commandFields,
    timeoutMs: StartCommandRequestSchema.shape.timeoutMs.describe(
      "Kill the command's process group after this many ms; default no limit.",
    ),
  })
  .strict();

/** `read_command_output`: the output of a background command from an offset, optionally after a wait. */
export const ReadCommandOutputInput = z
  .object({
    sandboxId,
    commandId: CommandIdSchema.describe('The command id start_background_command returned (cmd_...).'),
    offset: z
      .number()
      .int()
      .min(0)
      .default(0)
      .describe('Output offset to read from: 0 for the beginning, or nextOffset of the previous read.'),
    waitMs: z
      .number()
      .int()
      .min(0)
      .max(300_000)
      .default(0)
      .describe('Wait up to this many ms for the command to exit before reading; default 0 (read at once).'),
  })
  .strict();

/** `read_file`: one file's content. */
export const ReadFileInput = z
  .object({
    sandboxId,
    path: SandboxPathSchema.describe('Absolute path inside the sandbox.'),
    encoding: EncodingSchema.describe('utf8 (default) returns text; base64 returns the bytes as base64.'),
  })
  .strict();

/** `write_file`: one file's whole content (parents are created). */
export const WriteFileInput = z
  .object({
    sandboxId,
    path: SandboxPathSchema.describe('Absolute path inside the sandbox; missing parent directories are created.'),
    content: z.string().max(16_000_000).describe('The whole new content of the file.'),
    encoding: EncodingSchema,
    mode: WriteFileQuerySchema.shape.mode.describe('Permission bits in octal, for example 644 (default) or 755.'),
  })
  .strict();

/** `list_files`: a directory, `depth` levels deep. */
export const ListFilesInput = z
  .object({
    sandboxId,
    path: ListFilesQuerySchema.shape.path.describe('Absolute path of the directory.'),
    depth: z.number().int().min(1).max(32).default(1).describe('Levels to recurse (1 = direct children).'),
  })
  .strict();

/** Tools that take only the sandbox: pause, resume, delete. */
export const SandboxOnlyInput = z.object({ sandboxId }).strict();

/** `fork_sandbox`: N children of one sandbox. */
export const ForkSandboxInput = z.object({ sandboxId, count: ForkSandboxRequestSchema.shape.count }).strict();

/** `create_snapshot`: a snapshot of one sandbox. */
export const CreateSnapshotInput = z
  .object({
    sandboxId,
    name: CreateSnapshotRequestSchema.shape.name.describe(
      'Name, unique per tenant; a named snapshot outlives its sandbox (create_sandbox fromSnapshot takes it).',
    ),
    memory: CreateSnapshotRequestSchema.shape.memory.describe(
      'Include processes and memory (default true); false keeps the files only.',
    ),
  })
  .strict();

/** `get_preview_url`: the preview URL of a TCP port inside a sandbox. */
export const GetPreviewUrlInput = z
  .object({
    sandboxId,
    port: z.number().int().min(1).max(65_535).describe('TCP port a server inside the sandbox listens on (1–65535).'),
    public: PortUrlRequestSchema.shape.public.describe(
      'true makes the port public (its URL answers anyone), false private again; default: unchanged (private).',
    ),
    signed: z
      .boolean()
      .optional()
      .describe('Return a signed URL that works in a browser without the access token until it expires.'),
    ttlMs: PortUrlRequestSchema.shape.ttlMs.describe('Life of a signed URL in ms (1 s to 7 days; default 1 hour).'),
  })
  .strict();
