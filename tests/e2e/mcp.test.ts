/**
 * End to end: an MCP client from @modelcontextprotocol/sdk drives Burrow's tools over stdio (spawning the BUILT CLI,
 * `burrow mcp`) and over streamable HTTP (`/mcp` on a REAL server), against real runsc sandboxes.
 */
import { BURROW_TOOL_NAMES } from '@burrow/mcp';
import { BurrowClient, Sandbox } from '@burrow/sdk';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './burrow-test-server.js';
import { CLI_BIN } from './cli-runner.js';

const RUN_ID = `mcp-${Date.now().toString(36)}`;
const MISSING_ID = 'sbx_00000000000000000000';
let server: TestServer;
const admin = () => ({ apiUrl: server.apiUrl, apiKey: server.adminKey });
const clients: Client[] = [];

/** What one tool call answered: the result, its structured content and its text. */
interface ToolAnswer {
  isError: boolean;
  json: Record<string, unknown>;
  text: string;
}

async function call(client: Client, name: string, args: Record<string, unknown>): Promise<ToolAnswer> {
  const startedAt = Date.now();
  const result = await client.callTool({ name, arguments: args });
  if (process.env.MCP_TEST_TIMES === '1') console.info(`${name} ${Date.now() - startedAt} ms`);
  const content = result.content as Array<{ type: string; text?: string }>;
  return {
    isError: result.isError === true,
    json: (result.structuredContent ?? {}) as Record<string, unknown>,
    text: content.map((part) => part.text ?? '').join('\n'),
  };
}

/** A successful call's structured content; fails the test with the tool's error text otherwise. */
async function ok(client: Client, name: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const answer = await call(client, name, args);
  expect(answer.isError, `${name} answered an error: ${answer.text}`).toBe(false);
  return answer.json;
}

async function stdioClient(apiKey: string): Promise<Client> {
  const client = new Client({ name: 'burrow-mcp-test', version: '0.0.0' });
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [CLI_BIN, 'mcp'],
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', BURROW_URL: server.apiUrl, BURROW_API_KEY: apiKey },
    stderr: 'pipe',
  });
  await client.connect(transport);
  clients.push(client);
  return client;
}

async function httpClient(apiKey: string): Promise<Client> {
  const client = new Client({ name: 'burrow-mcp-test', version: '0.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL('/mcp', server.apiUrl), {
    requestInit: { headers: { authorization: `Bearer ${apiKey}` } },
  });
  await client.connect(transport);
  clients.push(client);
  return client;
}

beforeAll(async () => {
  server = await startTestServer();
  console.info(`mcp e2e: run ${RUN_ID}, server ${server.apiUrl}`);
});

afterAll(async () => {
  try {
    for (const client of clients) await client.close().catch(() => {});
    if (server !== undefined) {
      for await (const left of Sandbox.listAll({ ...admin(), labels: { e2e: RUN_ID } })) {
        await left.delete().catch(() => {});
      }
    }
  } finally {
    await server?.close();
  }
});

/**
 * The flow both transports must carry: list the tools, run a command, write, list and read a file, fork and find the
 * file in the child, and a bad sandbox id as a tool error with the API's code and hint.
 */
async function commonFlow(client: Client, id: string, path: string): Promise<void> {
  const { tools } = await client.listTools();
  expect(tools.map((tool) => tool.name).sort()).toEqual([...BURROW_TOOL_NAMES].sort());
  const runCommand = tools.find((tool) => tool.name === 'run_command');
  expect(runCommand?.inputSchema.required).toEqual(['sandboxId', 'cmd']);
  expect(JSON.stringify(runCommand?.inputSchema.properties?.sandboxId)).toContain('^sbx_');

  const run = await ok(client, 'run_command', {
    sandboxId: id,
    cmd: "python3 -c 'print(6*7)'; echo oops >&2; exit 3",
  });
  expect(run).toMatchObject({ exitCode: 3, signal: null, timedOut: false, stdout: '42\n', stderr: 'oops\n' });

  const written = await ok(client, 'write_file', { sandboxId: id, path, content: 'héllo\n' });
  expect(written).toMatchObject({ path, sizeBytes: 7, mode: '644' });
  const directory = path.slice(0, path.lastIndexOf('/'));
  const listed = await ok(client, 'list_files', { sandboxId: id, path: directory });
  expect(listed.items).toEqual([{ path, type: 'file', sizeBytes: 7, mode: '644' }]);
  expect(await ok(client, 'read_file', { sandboxId: id, path })).toMatchObject({ content: 'héllo\n', sizeBytes: 7 });

  const forked = await ok(client, 'fork_sandbox', { sandboxId: id });
  const children = forked.items as Array<{ id: string; state: string; parentId: string }>;
  expect(children).toHaveLength(1);
  const child = children[0];
  expect(child).toMatchObject({ state: 'running', parentId: id });
  expect(child?.id).not.toBe(id);
  const inChild = await ok(client, 'run_command', { sandboxId: child?.id, cmd: ['cat', path] });
  expect(inChild.stdout).toBe('héllo\n');
  expect(await ok(client, 'delete_sandbox', { sandboxId: child?.id })).toEqual({ deleted: child?.id });

  const missing = await call(client, 'run_command', { sandboxId: MISSING_ID, cmd: 'true' });
  expect(missing.isError).toBe(true);
  expect(missing.text).toMatch(/^error sandbox_not_found: /);
  expect(missing.text).toMatch(/\nhint: /);
  expect(missing.text).toMatch(/\nrequest id: req_/);
  expect(missing.json.error).toMatchObject({ code: 'sandbox_not_found' });
  const malformed = await call(client, 'read_file', { sandboxId: 'sbx_nope', path: '/etc/hostname' });
  expect(malformed.isError).toBe(true);
  expect(malformed.text).toContain('must look like sbx_ followed by 20 base32 characters');
}

/** The sandbox both transports work in: created by the stdio client's create_sandbox, found by the HTTP one's list. */
let id = '';

describe('burrow mcp (stdio, the built CLI)', () => {
  let client: Client;

  it('creates a sandbox, lists the tools, runs a command, writes and reads a file, forks, names a bad id', async () => {
    client = await stdioClient(server.adminKey);
    const created = await ok(client, 'create_sandbox', { labels: { e2e: RUN_ID } });
    expect(created).toMatchObject({ state: 'running', template: 'base', labels: { e2e: RUN_ID } });
    id = String(created.id);
    await commonFlow(client, id, '/root/stdio/a.txt');
  });

  it('cuts output past the limit with a note', async () => {
    const run = await ok(client, 'run_command', { sandboxId: id, cmd: "head -c 70000 /dev/zero | tr '\\0' a" });
    expect(run.stdout).toBe('a'.repeat(65_536));
    expect(run.notes).toEqual([expect.stringContaining('stdout truncated: the last 4464 bytes are left out')]);
  });

  it('answers a command past its timeoutMs with its output so far, timedOut and a note', async () => {
    const run = await ok(client, 'run_command', { sandboxId: id, cmd: 'echo before; sleep 30', timeoutMs: 1_000 });
    expect(run).toMatchObject({ timedOut: true, stdout: 'before\n' });
    expect(run.notes).toEqual([expect.stringContaining('ran past timeoutMs (1000 ms) and was killed')]);
  });

  it('starts a background command and reads its output from offsets', async () => {
    const started = await ok(client, 'start_background_command', {
      sandboxId: id,
      cmd: 'for i in 1 2 3; do echo line$i; done; sleep 0.3; echo done >&2',
    });
    expect(String(started.commandId)).toMatch(/^cmd_/);
    const read = await ok(client, 'read_command_output', {
      sandboxId: id,
      commandId: started.commandId,
      waitMs: 30_000,
    });
    expect(read).toMatchObject({
      status: 'exited',
      exitCode: 0,
      stdout: 'line1\nline2\nline3\n',
      stderr: 'done\n',
      nextOffset: 23,
    });
    const rest = await ok(client, 'read_command_output', { sandboxId: id, commandId: started.commandId, offset: 18 });
    expect(rest).toMatchObject({ stdout: '', stderr: 'done\n', nextOffset: 23 });
  });

  it('an invalid key gets unauthorized from every tool', async () => {
    const stranger = await stdioClient('bk_00000000000000000000000000000000');
    const listed = await call(stranger, 'list_sandboxes', {});
    expect(listed.isError).toBe(true);
    expect(listed.text).toMatch(/^error unauthorized: /);
    expect(listed.text).toMatch(/\nhint: /);
  });
});

describe('/mcp (streamable HTTP on the server)', () => {
  let client: Client;

  it('lists sandboxes and the tools, runs a command, writes and reads a file, forks, names a bad id', async () => {
    client = await httpClient(server.adminKey);
    const page = await ok(client, 'list_sandboxes', { labels: { e2e: RUN_ID }, state: 'running' });
    expect((page.items as Array<{ id: string }>).map((s) => s.id)).toEqual([id]);
    await commonFlow(client, id, '/root/http/a.txt');
  });

  it("acts with the caller's key: another tenant's key sees none of this tenant's sandboxes", async () => {
    const other = await new BurrowClient(admin()).keys.create({ name: RUN_ID, tenantId: 'mcp-other' });
    const outsider = await httpClient(other.secret);
    const denied = await call(outsider, 'run_command', { sandboxId: id, cmd: 'true' });
    expect(denied.json.error).toMatchObject({ code: 'sandbox_not_found' });
    expect(await ok(outsider, 'list_sandboxes', {})).toEqual({ items: [], nextCursor: null });
  });

  it('a revoked key is refused with the API 401 and its hint', async () => {
    const keys = new BurrowClient(admin()).keys;
    const created = await keys.create({ name: `${RUN_ID}-revoked` });
    const member = await httpClient(created.secret);
    expect(await ok(member, 'list_sandboxes', { labels: { e2e: 'none' } })).toEqual({ items: [], nextCursor: null });
    await keys.revoke(created.key.id);
    const refused = member.callTool({ name: 'list_sandboxes', arguments: {} });
    await expect(refused).rejects.toMatchObject({ code: 401 });
    await expect(refused).rejects.toThrow(/"code":"unauthorized".*"hint":/);
    await expect(httpClient('bk_00000000000000000000000000000000')).rejects.toMatchObject({ code: 401 });
  });

  it('answers GET and DELETE with 405 (stateless: nothing to stream or end)', async () => {
    for (const method of ['GET', 'DELETE']) {
      const response = await fetch(new URL('/mcp', server.apiUrl), {
        method,
        headers: { authorization: `Bearer ${server.adminKey}`, accept: 'text/event-stream' },
      });
      expect(response.status).toBe(405);
      expect(response.headers.get('allow')).toBe('POST');
    }
  });

  it('a scoped key limits what the tools can do', async () => {
    const keys = new BurrowClient(admin()).keys;
    const reader = await keys.create({ name: `${RUN_ID}-reader`, scopes: ['sandboxes:read', 'files'] });
    const readerClient = await httpClient(reader.secret);
    const page = await ok(readerClient, 'list_sandboxes', { labels: { e2e: RUN_ID } });
    expect((page.items as Array<{ id: string }>).map((s) => s.id)).toEqual([id]);
    expect(await ok(readerClient, 'read_file', { sandboxId: id, path: '/root/http/a.txt' })).toMatchObject({
      content: 'héllo\n',
    });
    const denied = await call(readerClient, 'run_command', { sandboxId: id, cmd: 'true' });
    expect(denied.json.error).toMatchObject({ code: 'forbidden' });
    expect(denied.text).toContain('lacks the commands scope');
    expect(denied.text).toMatch(/\nhint: /);
    expect((await call(readerClient, 'delete_sandbox', { sandboxId: id })).json.error).toMatchObject({
      code: 'forbidden',
    });

    const pinned = await keys.create({ name: `${RUN_ID}-pinned`, restriction: { type: 'sandbox', sandboxId: id } });
    const pinnedClient = await stdioClient(pinned.secret);
    expect(await ok(pinnedClient, 'run_command', { sandboxId: id, cmd: 'echo pinned' })).toMatchObject({
      stdout: 'pinned\n',
    });
    const creates = await call(pinnedClient, 'create_sandbox', {});
    expect(creates.json.error).toMatchObject({ code: 'forbidden' });
    expect(creates.text).toContain('cannot create sandboxes');
  });

  it('snapshots, pauses and resumes the sandbox, then deletes it', async () => {
    const snapshot = await ok(client, 'create_snapshot', { sandboxId: id, memory: false });
    expect(snapshot).toMatchObject({ sandboxId: id, memory: false });
    expect(String(snapshot.id)).toMatch(/^snp_/);
    expect(await ok(client, 'pause_sandbox', { sandboxId: id })).toMatchObject({ state: 'paused' });
    expect(await ok(client, 'resume_sandbox', { sandboxId: id })).toMatchObject({ state: 'running' });
    const preview = await ok(client, 'get_preview_url', { sandboxId: id, port: 8000, signed: true, ttlMs: 60_000 });
    expect(String(preview.url)).toMatch(new RegExp(`^http://8000-${id.replace('_', '-')}\\.`));
    expect(String(preview.url)).toContain('burrow_signature=');
    expect((await call(client, 'get_preview_url', { sandboxId: id, port: 70_000 })).isError).toBe(true);
    expect(await ok(client, 'delete_sandbox', { sandboxId: id })).toEqual({ deleted: id });
    for (const [name, args] of [
      ['resume_sandbox', { sandboxId: id }],
      ['run_command', { sandboxId: id, cmd: 'true' }],
    ] as const) {
      expect((await call(client, name, args)).json.error, name).toMatchObject({ code: 'sandbox_not_found' });
    }
  });
});
