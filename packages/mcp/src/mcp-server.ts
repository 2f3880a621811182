import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ConnectionOptions } from '@burrow/sdk';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { type BurrowToolsOptions, registerBurrowTools } from './burrow-tools.js';

/** Name and version the MCP server reports in its `initialize` answer. */
export const MCP_SERVER_INFO = { name: 'burrow', version: '0.1.0' } as const;

const INSTRUCTIONS =
  'Burrow runs persistent, isolated Linux sandboxes (gVisor). Create one with create_sandbox and pass its id to the ' +
  'other tools. A sandbox keeps its files and processes until deleted; pause_sandbox frees its CPU and memory and ' +
  'any command or file call resumes it. Errors name a stable code and a hint saying what to do.';

/**
 * An MCP server with every Burrow tool registered, acting through the API with `options.connection`. Not connected
 * to a transport.
 * @example
 * ```ts
 * const server = createBurrowMcpServer({ connection: { apiUrl, apiKey } });
 * await server.connect(new StdioServerTransport());
 * ```
 */
export function createBurrowMcpServer(options: BurrowToolsOptions): McpServer {
  const server = new McpServer(MCP_SERVER_INFO, { capabilities: { tools: {} }, instructions: INSTRUCTIONS });
  registerBurrowTools(server, options);
  return server;
}

/**
 * Serves the tools over stdio (newline-delimited JSON-RPC on `stdin`/`stdout`) until `stdin` ends.
 * Nothing else may write to `stdout` meanwhile.
 * @returns once the client has closed the connection.
 */
export async function serveStdio(
  connection: ConnectionOptions,
  streams: { stdin: NodeJS.ReadableStream; stdout: NodeJS.WritableStream },
): Promise<void> {
  const server = createBurrowMcpServer({ connection });
  const transport = new StdioServerTransport(
    streams.stdin as ConstructorParameters<typeof StdioServerTransport>[0],
    streams.stdout as ConstructorParameters<typeof StdioServerTransport>[1],
  );
  const closed = new Promise<void>((resolve) => {
    server.server.onclose = () => resolve();
  });
  await server.connect(transport);
  await new Promise<void>((resolve) => {
    streams.stdin.once('end', resolve);
    streams.stdin.once('close', resolve);
  });
  await server.close();
  await closed;
}

/**
 * Answers one request of MCP's streamable HTTP transport, statelessly: every POST gets a fresh server whose tools act
 * with `options.connection` (the caller's own key), so no session state outlives the request and any server process
 * can take the next one; pass one `options.handles` to every request so that sandbox handles outlive it. GET (a server-to-client stream) and DELETE (a session's end) have nothing to serve: 405.
 * @param body - the request's JSON body, already parsed.
 */
export async function handleMcpHttpRequest(
  request: IncomingMessage,
  response: ServerResponse,
  body: unknown,
  options: BurrowToolsOptions,
): Promise<void> {
  if (request.method !== 'POST') {
    response.writeHead(405, { allow: 'POST', 'content-type': 'application/json' });
    response.end(
      JSON.stringify({
        jsonrpc: '2.0',
        error: { code: -32000, message: 'this MCP endpoint is stateless: send each message as a POST' },
        id: null,
      }),
    );
    return;
  }
  const server = createBurrowMcpServer(options);
  const transport = new StreamableHTTPServerTransport({ enableJsonResponse: true });
  response.once('close', () => {
    void transport.close();
    void server.close();
  });
  await server.connect(transport);
  await transport.handleRequest(request, response, body);
}
