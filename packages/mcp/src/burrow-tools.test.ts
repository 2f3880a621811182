import { SandboxNotFoundError } from '@burrow/sdk';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { describe, expect, it } from 'vitest';
import { BURROW_TOOL_NAMES } from './burrow-tools.js';
import { createBurrowMcpServer } from './mcp-server.js';
import { errorResult, truncateText } from './tool-results.js';

/** A client linked in memory to a Burrow MCP server whose API URL refuses connections (port 9, discard). */
async function linkedClient(): Promise<Client> {
  const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
  await createBurrowMcpServer({ connection: { apiUrl: 'http://127.0.0.1:9', apiKey: 'bk_unused' } }).connect(
    serverSide,
  );
  const client = new Client({ name: 'unit', version: '0.0.0' });
  await client.connect(clientSide);
  return client;
}

describe('Burrow MCP tools', () => {
  it('offers every tool with a plain object JSON Schema at the root (MCP refuses a $ref root)', async () => {
    const client = await linkedClient();
    const { tools } = await client.listTools();
    expect(tools.map((tool) => tool.name)).toEqual([...BURROW_TOOL_NAMES]);
    for (const tool of tools) {
      expect(tool.inputSchema.type, tool.name).toBe('object');
      expect(tool.inputSchema, tool.name).not.toHaveProperty('$ref');
      expect(tool.description?.length, tool.name).toBeGreaterThan(20);
    }
    const create = tools.find((tool) => tool.name === 'create_sandbox');
    expect(Object.keys(create?.inputSchema.properties ?? {})).toEqual(
      expect.arrayContaining(['template', 'memoryMiB', 'timeoutMs', 'labels', 'fromSnapshot', 'network']),
    );
    await client.close();
  });

  it('turns an unreachable server into a tool error with the SDK code and hint', async () => {
    const client = await linkedClient();
    const result = await client.callTool({ name: 'list_sandboxes', arguments: {} });
    expect(result.isError).toBe(true);
    expect(result.structuredContent).toMatchObject({ error: { code: 'connection_failed' } });
    expect((result.content as Array<{ text: string }>)[0]?.text).toMatch(/^error connection_failed: .*\nhint: /s);
    await client.close();
  });

  it('refuses arguments the contract refuses, before any request', async () => {
    const client = await linkedClient();
    const result = await client.callTool({
      name: 'run_command',
      arguments: { sandboxId: 'sbx_aaaaaaaaaaaaaaaaaaaa', cmd: 'true', timeoutMs: 0 },
    });
    expect(result.isError).toBe(true);
    expect((result.content as Array<{ text: string }>)[0]?.text).toContain('timeoutMs');
    await client.close();
  });
});

describe('errorResult', () => {
  it('carries code, message, hint and request id', () => {
    const result = errorResult(
      new SandboxNotFoundError('no sandbox sbx_x', {
        code: 'sandbox_not_found',
        hint: 'list them',
        requestId: 'req_1',
      }),
    );
    expect(result).toEqual({
      isError: true,
      content: [
        { type: 'text', text: 'error sandbox_not_found: no sandbox sbx_x\nhint: list them\nrequest id: req_1' },
      ],
      structuredContent: {
        error: { code: 'sandbox_not_found', message: 'no sandbox sbx_x', hint: 'list them', requestId: 'req_1' },
      },
    });
  });
});

describe('truncateText', () => {
  it('keeps text within the limit whole', () => {
    expect(truncateText('abc', 3)).toEqual({ text: 'abc', omittedBytes: 0 });
  });

  it('cuts on a UTF-8 character boundary and counts the bytes left out', () => {
    // 'é' is 2 bytes: a cut after 2 bytes would split the first one.
    expect(truncateText('aéé', 2)).toEqual({ text: 'a', omittedBytes: 4 });
    expect(truncateText('aéé', 3)).toEqual({ text: 'aé', omittedBytes: 2 });
  });
});
