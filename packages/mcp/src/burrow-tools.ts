/**
 * The Burrow tools an MCP client sees. Each acts through the Burrow API with the caller's own connection (URL and API
 * key) by way of `@burrow/sdk`, so a key that may not do something cannot make a tool do it either: the API's own
 * authentication, tenancy, quarantine and quota checks answer, and their errors come back as tool errors.
 */
import { CommandTimeoutError, type ConnectionOptions, Sandbox } from '@burrow/sdk';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { z } from 'zod';
import { SandboxHandles } from './sandbox-handles.js';
import {
  CreateSandboxInput,
  CreateSnapshotInput,
  ForkSandboxInput,
  GetPreviewUrlInput,
  ListFilesInput,
  ListSandboxesInput,
  ReadCommandOutputInput,
  ReadFileInput,
  RunCommandInput,
  SandboxOnlyInput,
  StartBackgroundCommandInput,
  WriteFileInput,
} from './tool-inputs.js';
import { errorResult, jsonResult, sandboxSummary, truncateText } from './tool-results.js';

/** Options of {@link registerBurrowTools}. */
export interface BurrowToolsOptions {
  /** How the tools reach the Burrow API, and with which key. */
  connection: ConnectionOptions;
  /**
   * Most bytes of text one answer carries per output (stdout, stderr, a file, a command's output read); the rest is
   * left out with a note saying how much and how to get it.
   * @default 65_536 (64 KiB)
   */
  outputLimitBytes?: number | undefined;
  /** Most entries `list_files` returns. @default 1_000 */
  listLimit?: number | undefined;
  /**
   * Handles on sandboxes to reuse across calls (and, for a server that builds one MCP server per request, across
   * requests). @default a cache of this server's own
   */
  handles?: SandboxHandles | undefined;
}

/** Names of every tool {@link registerBurrowTools} registers, in order. */
export const BURROW_TOOL_NAMES = [
  'create_sandbox',
  'list_sandboxes',
  'run_command',
  'start_background_command',
  'read_command_output',
  'read_file',
  'write_file',
  'list_files',
  'pause_sandbox',
  'resume_sandbox',
  'fork_sandbox',
  'create_snapshot',
  'delete_sandbox',
  'get_preview_url',
] as const;

/** One tool's result, or its failure turned into an `isError` result with the API's code and hint. */
async function answer(run: () => Promise<CallToolResult>): Promise<CallToolResult> {
  try {
    return await run();
  } catch (err) {
    return errorResult(err);
  }
}

/**
 * Registers the Burrow sandbox tools on an MCP server.
 * @example
 * ```ts
 * const server = new McpServer({ name: 'burrow', version: '0.1.0' });
 * registerBurrowTools(server, { connection: { apiUrl: 'http://127.0.0.1:7420', apiKey: process.env.BURROW_API_KEY } });
 * ```
 */
export function registerBurrowTools(server: McpServer, options: BurrowToolsOptions): void {
  const connection = options.connection;
  const limit = options.outputLimitBytes ?? 65_536;
  const listLimit = options.listLimit ?? 1_000;
  const handles = options.handles ?? new SandboxHandles();
  const get = (sandboxId: string) => handles.get(sandboxId, connection);

  server.registerTool(
    'create_sandbox',
    {
      title: 'Create a sandbox',
      description:
        'Create an isolated, persistent Linux sandbox (gVisor) and wait until it runs. Returns its id for the other ' +
        'tools. Defaults: template base (Debian with python3, git, curl, node), 1 CPU, 512 MiB memory, 2 GiB disk.',
      inputSchema: CreateSandboxInput,
    },
    (input: z.output<typeof CreateSandboxInput>) =>
      answer(async () => {
        const sandbox = await Sandbox.create({ ...input, ...connection });
        handles.remember(sandbox, connection);
        return jsonResult(sandboxSummary(sandbox.info));
      }),
  );

  server.registerTool(
    'list_sandboxes',
    {
      title: 'List sandboxes',
      description: 'List sandboxes, newest first, filtered by state and labels; paused ones included.',
      inputSchema: ListSandboxesInput,
      annotations: { readOnlyHint: true },
    },
    (input: z.output<typeof ListSandboxesInput>) =>
      answer(async () => {
        const page = await Sandbox.list({ ...input, ...connection });
        return jsonResult({ items: page.items.map((s) => sandboxSummary(s.info)), nextCursor: page.nextCursor });
      }),
  );

  server.registerTool(
    'run_command',
    {
      title: 'Run a command',
      description:
        'Run a command in a sandbox to its end and return its exit code, stdout and stderr. A non-zero exit is a ' +
        'result, not an error. Output past the limit is cut with a note; long jobs go to start_background_command.',
      inputSchema: RunCommandInput,
    },
    (input: z.output<typeof RunCommandInput>) =>
      answer(async () => {
        const { sandboxId, cmd, stdin, ...rest } = input;
        const sandbox = await get(sandboxId);
        let result: Awaited<ReturnType<typeof sandbox.commands.run>>;
        try {
          result = await sandbox.commands.run(cmd, { ...rest, ...(stdin === undefined ? {} : { stdin }) });
        } catch (err) {
          if (!(err instanceof CommandTimeoutError)) throw err;
          result = err.result;
        }
        const notes: string[] = [];
        if (result.timedOut) {
          notes.push(`the command ran past timeoutMs (${rest.timeoutMs} ms) and was killed; pass a larger timeoutMs`);
        }
        const stdout = truncateText(result.stdout, limit);
        const stderr = truncateText(result.stderr, limit);
        for (const [name, cut] of [
          ['stdout', stdout],
          ['stderr', stderr],
        ] as const) {
          if (cut.omittedBytes > 0) {
            notes.push(
              `${name} truncated: the last ${cut.omittedBytes} bytes are left out; redirect it to a file and read parts ` +
                'of it (for example with tail or grep)',
            );
          }
        }
        if (result.truncated) notes.push('the server kept only the first 16 MiB of an output');
        return jsonResult({
          exitCode: result.exitCode,
          signal: result.signal,
          timedOut: result.timedOut,
          ...(result.reason === null ? {} : { reason: result.reason }),
          durationMs: result.durationMs,
          stdout: stdout.text,
          stderr: stderr.text,
          ...(notes.length === 0 ? {} : { notes }),
        });
      }),
  );

  server.registerTool(
    'start_background_command',
    {
      title: 'Start a background command',
      description:
        'Start a command that keeps running after this call (a server, a long build); it survives pause, resume ' +
        'and fork. Returns its commandId for read_command_output.',
      inputSchema: StartBackgroundCommandInput,
    },
    (input: z.output<typeof StartBackgroundCommandInput>) =>
      answer(async () => {
        const { sandboxId, cmd, ...rest } = input;
        const sandbox = await get(sandboxId);
        const handle = await sandbox.commands.run(cmd, { ...rest, background: true });
        return jsonResult({ sandboxId, commandId: handle.commandId, pid: handle.pid });
      }),
  );

  server.registerTool(
    'read_command_output',
    {
      title: 'Read a background command',
      description:
        "Read a background command's status and its output from an offset (0, or the nextOffset of the last read), " +
        'optionally waiting up to waitMs for it to exit first.',
      inputSchema: ReadCommandOutputInput,
      annotations: { readOnlyHint: true },
    },
    (input: z.output<typeof ReadCommandOutputInput>) =>
      answer(async () => readCommandOutput(await get(input.sandboxId), input, limit)),
  );

  server.registerTool(
    'read_file',
    {
      title: 'Read a file',
      description:
        'Read a file from a sandbox, as UTF-8 text (default) or base64. Past the limit it is cut with a note.',
      inputSchema: ReadFileInput,
      annotations: { readOnlyHint: true },
    },
    (input: z.output<typeof ReadFileInput>) =>
      answer(async () => {
        const bytes = Buffer.from(await (await get(input.sandboxId)).files.read(input.path));
        const shown = input.encoding === 'base64' ? bytes.subarray(0, limit) : undefined;
        const cut = shown === undefined ? truncateText(bytes.toString('utf8'), limit) : undefined;
        const omittedBytes = shown === undefined ? (cut?.omittedBytes ?? 0) : bytes.byteLength - shown.byteLength;
        return jsonResult({
          path: input.path,
          sizeBytes: bytes.byteLength,
          encoding: input.encoding,
          content: shown === undefined ? (cut?.text ?? '') : shown.toString('base64'),
          ...(omittedBytes === 0
            ? {}
            : {
                notes: [
                  `truncated: the last ${omittedBytes} of ${bytes.byteLength} bytes are left out; read parts of it ` +
                    'with run_command (for example tail -c, sed -n or grep)',
                ],
              }),
        });
      }),
  );

  server.registerTool(
    'write_file',
    {
      title: 'Write a file',
      description: 'Write a whole file in a sandbox (UTF-8 text, or base64 for binary data); parents are created.',
      inputSchema: WriteFileInput,
    },
    (input: z.output<typeof WriteFileInput>) =>
      answer(async () => {
        const data = input.encoding === 'base64' ? Buffer.from(input.content, 'base64') : input.content;
        const info = await (await get(input.sandboxId)).files.write(input.path, data, {
          mode: Number.parseInt(input.mode, 8),
        });
        return jsonResult({ path: info.path, sizeBytes: info.sizeBytes, mode: info.mode.toString(8) });
      }),
  );

  server.registerTool(
    'list_files',
    {
      title: 'List files',
      description: 'List a directory in a sandbox (depth levels deep): path, type, size, permission bits.',
      inputSchema: ListFilesInput,
      annotations: { readOnlyHint: true },
    },
    (input: z.output<typeof ListFilesInput>) =>
      answer(async () => {
        const items = await (await get(input.sandboxId)).files.list(input.path, { depth: input.depth });
        return jsonResult({
          items: items.slice(0, listLimit).map((item) => ({
            path: item.path,
            type: item.type,
            sizeBytes: item.sizeBytes,
            mode: item.mode.toString(8),
            ...(item.symlinkTarget === undefined ? {} : { symlinkTarget: item.symlinkTarget }),
          })),
          ...(items.length > listLimit
            ? { notes: [`${items.length - listLimit} more entries left out; list a subdirectory or a smaller depth`] }
            : {}),
        });
      }),
  );

  server.registerTool(
    'pause_sandbox',
    {
      title: 'Pause a sandbox',
      description:
        'Pause a sandbox: its processes and memory are saved with its disk and its CPU and memory released. ' +
        'Commands and file calls resume it on their own; resume_sandbox does it explicitly.',
      inputSchema: SandboxOnlyInput,
    },
    (input: z.output<typeof SandboxOnlyInput>) =>
      answer(async () => jsonResult(sandboxSummary(await (await get(input.sandboxId)).pause()))),
  );

  server.registerTool(
    'resume_sandbox',
    {
      title: 'Resume a sandbox',
      description: 'Resume a paused sandbox under the same id, its processes continuing where they were.',
      inputSchema: SandboxOnlyInput,
    },
    (input: z.output<typeof SandboxOnlyInput>) =>
      answer(async () => jsonResult(sandboxSummary((await Sandbox.resume(input.sandboxId, connection)).info))),
  );

  server.registerTool(
    'fork_sandbox',
    {
      title: 'Fork a sandbox',
      description:
        'Fork a sandbox into count new running sandboxes, each with a copy of its disk and memory at this moment ' +
        '(processes included) and an id of its own. Returns the children.',
      inputSchema: ForkSandboxInput,
    },
    (input: z.output<typeof ForkSandboxInput>) =>
      answer(async () => {
        const children = await (await get(input.sandboxId)).fork({ count: input.count });
        for (const child of children) handles.remember(child, connection);
        return jsonResult({ items: children.map((child) => sandboxSummary(child.info)) });
      }),
  );

  server.registerTool(
    'create_snapshot',
    {
      title: 'Snapshot a sandbox',
      description:
        'Take a checksummed snapshot of a sandbox (files, and processes and memory unless memory is false). A named ' +
        'one outlives the sandbox; create_sandbox with fromSnapshot starts a new sandbox from it.',
      inputSchema: CreateSnapshotInput,
    },
    (input: z.output<typeof CreateSnapshotInput>) =>
      answer(async () => {
        const { sandboxId, name, memory } = input;
        const snapshot = await (await get(sandboxId)).snapshots.create({
          memory,
          ...(name === undefined ? {} : { name }),
        });
        return jsonResult({ ...snapshot });
      }),
  );

  server.registerTool(
    'delete_sandbox',
    {
      title: 'Delete a sandbox',
      description: 'Delete a sandbox with its files, processes and unnamed snapshots. This cannot be undone.',
      inputSchema: SandboxOnlyInput,
      annotations: { destructiveHint: true },
    },
    (input: z.output<typeof SandboxOnlyInput>) =>
      answer(async () => {
        try {
          await (await get(input.sandboxId)).delete();
        } finally {
          handles.forget(input.sandboxId, connection);
        }
        return jsonResult({ deleted: input.sandboxId });
      }),
  );

  server.registerTool(
    'get_preview_url',
    {
      title: 'Preview URL of a sandbox port',
      description:
        'The URL that reaches a TCP port inside the sandbox (a dev server, a notebook, an API) through the Burrow ' +
        'server. A private port needs the returned accessToken in the X-Burrow-Access-Token header; signed: true ' +
        'returns a URL that opens in a browser until it expires; public: true opens it to anyone. A paused ' +
        'sandbox resumes on the first request.',
      inputSchema: GetPreviewUrlInput,
    },
    (input: z.output<typeof GetPreviewUrlInput>) =>
      answer(async () => {
        const { sandboxId, port, ...options } = input;
        const url = await (await get(sandboxId)).ports.url(port, {
          ...(options.public === undefined ? {} : { public: options.public }),
          ...(options.signed === undefined ? {} : { signed: options.signed }),
          ...(options.ttlMs === undefined ? {} : { ttlMs: options.ttlMs }),
        });
        return jsonResult({ ...url });
      }),
  );
}

/**
 * A background command's status and its output from `offset`, at most `limitBytes` of it: read with `follow: false`
 * (what was written so far), cut on a chunk's UTF-8 character boundary, with `nextOffset` where the next read starts.
 */
async function readCommandOutput(
  sandbox: Sandbox,
  input: z.output<typeof ReadCommandOutputInput>,
  limitBytes: number,
): Promise<CallToolResult> {
  const handle = await sandbox.commands.connect(input.commandId, { offset: input.offset });
  const info = input.waitMs > 0 ? await handle.wait({ timeoutMs: input.waitMs }) : await handle.info();
  const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
  const text = { stdout: '', stderr: '' };
  let taken = 0;
  let nextOffset = input.offset;
  let more = false;
  const stream = handle.output({ offset: input.offset, follow: false });
  try {
    for await (const event of stream) {
      if (event.type === 'end' || event.type === 'exit') {
        nextOffset = event.offset;
        break;
      }
      const start = event.offset - event.data.byteLength;
      let take = Math.min(event.data.byteLength, limitBytes - taken);
      if (take < event.data.byteLength) {
        while (take > 0 && ((event.data[take] ?? 0) & 0xc0) === 0x80) take -= 1;
        more = true;
      }
      text[event.type] += decoders[event.type].decode(event.data.subarray(0, take), { stream: true });
      taken += take;
      nextOffset = start + take;
      if (more) break;
    }
  } finally {
    stream.close();
  }
  text.stdout += decoders.stdout.decode();
  text.stderr += decoders.stderr.decode();
  const notes: string[] = [];
  if (more) notes.push(`more output follows: read again from nextOffset ${nextOffset}`);
  if (stream.droppedBytes > 0) {
    notes.push(`${stream.droppedBytes} bytes before this output were already dropped (the log keeps the last 16 MiB)`);
  }
  return jsonResult({
    commandId: info.commandId,
    status: info.status,
    exitCode: info.exitCode,
    signal: info.signal,
    timedOut: info.timedOut,
    stdout: text.stdout,
    stderr: text.stderr,
    nextOffset,
    ...(notes.length === 0 ? {} : { notes }),
  });
}
