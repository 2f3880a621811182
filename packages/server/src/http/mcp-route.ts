import type { SandboxHandles } from '@burrow/mcp';
import { mapError } from './error-mapping.js';
import { bearerSecret, TENANT_HEADER } from './principal.js';
import type { ZodApp } from './zod-app.js';

/**
 * `/mcp`: MCP's streamable HTTP transport (stateless, JSON answers), for agents that speak MCP rather than the REST
 * API. The auth hook has already checked the bearer key like on every route. The tools then call this server's own
 * API on the listener the request came in on, with the caller's key and tenant header, so every check a REST call
 * passes (tenancy, quarantine, quotas, activity, any restriction on the key) applies to a tool call unchanged: the route holds no rule of
 * its own. Left out of the OpenAPI document: it speaks JSON-RPC, not the REST contract. `@burrow/mcp` (the MCP SDK,
 * ajv and the tools) loads on the first request, so a server nobody asks for MCP does not start slower.
 */
export function registerMcpRoute(app: ZodApp): void {
  let handles: SandboxHandles | undefined;
  app.route({
    method: ['POST', 'GET', 'DELETE'],
    url: '/mcp',
    schema: { hide: true },
    handler: async (request, reply) => {
      const socket = request.raw.socket;
      const host = socket.localAddress ?? '127.0.0.1';
      const tenant = request.headers[TENANT_HEADER];
      reply.hijack();
      try {
        const mcp = await import('@burrow/mcp');
        handles ??= new mcp.SandboxHandles();
        await mcp.handleMcpHttpRequest(request.raw, reply.raw, request.body, {
          connection: {
            apiUrl: `http://${host.includes(':') ? `[${host}]` : host}:${socket.localPort}`,
            apiKey: bearerSecret(request.headers.authorization) ?? undefined,
            tenantId: typeof tenant === 'string' ? tenant : undefined,
          },
          handles,
        });
      } catch (error) {
        // Fastify's error handler no longer owns a hijacked reply: answer here, or the client would wait for nothing.
        request.log.error({ err: error }, 'mcp request failed');
        if (reply.raw.headersSent) {
          reply.raw.end();
          return;
        }
        const mapped = mapError(error, request.id);
        reply.raw.writeHead(mapped.statusCode, { 'content-type': 'application/json' });
        reply.raw.end(JSON.stringify(mapped.envelope));
      }
    },
  });
}
