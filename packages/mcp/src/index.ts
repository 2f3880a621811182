export { BURROW_TOOL_NAMES, type BurrowToolsOptions, registerBurrowTools } from './burrow-tools.js';
export { createBurrowMcpServer, handleMcpHttpRequest, MCP_SERVER_INFO, serveStdio } from './mcp-server.js';
export { SandboxHandles } from './sandbox-handles.js';
