import type { KeyScope } from '@burrow/contract';

/** What a route needs of the calling key. */
export interface RouteAccess {
  /** The scope the key must hold; `public` routes need no key at all. */
  scope: KeyScope | 'public';
  /** Whether the route only reads (viewer keys may call only these). */
  read: boolean;
  /**
   * `sandbox`: the route acts on the sandbox named by `:id` (a key restricted elsewhere gets `sandbox_not_found`);
   * `tenant`: it acts on the tenant as a whole (a restricted key gets `forbidden`).
   */
  target: 'sandbox' | 'tenant';
  /** The route makes a new sandbox (create, fork): a restricted key gets `forbidden`. */
  creates?: true;
}

const read = (scope: KeyScope | 'public', target: RouteAccess['target'] = 'tenant'): RouteAccess => ({
  scope,
  read: true,
  target,
});
const write = (scope: KeyScope, target: RouteAccess['target'] = 'tenant'): RouteAccess => ({
  scope,
  read: false,
  target,
});
const onSandbox = (scope: KeyScope, access: 'read' | 'write' = 'write'): RouteAccess =>
  access === 'read' ? read(scope, 'sandbox') : write(scope, 'sandbox');

/**
 * Every route of the API, `METHOD /pattern`, and what it needs. One table so that no route is forgotten: `buildApp`
 * refuses to start with a route missing here, and a test lists both ways. HEAD answers as its GET.
 */
export const ROUTE_ACCESS: Readonly<Record<string, RouteAccess>> = {
  'GET /v1/health': read('public'),
  // MCP: the auth hook still wants a key; each tool call is then checked as the REST call it makes.
  'POST /mcp': read('public'),
  'GET /mcp': read('public'),
  'DELETE /mcp': read('public'),
  'GET /v1/openapi.json': read('public'),
  // The web console: its files and sign-in need no key; a session acts with its key's own scopes.
  'GET /': read('public'),
  'GET /console/login': read('public'),
  'POST /v1/console/session': read('public'),
  'GET /v1/console/session': read('public'),
  'DELETE /v1/console/session': read('public'),
  'POST /v1/console/login-links': read('public'),
  'GET /metrics': read('admin'),

  'GET /v1/sandboxes': read('sandboxes:read'),
  'POST /v1/sandboxes': { ...write('sandboxes:write'), creates: true },
  'GET /v1/sandboxes/:id': onSandbox('sandboxes:read', 'read'),
  'PATCH /v1/sandboxes/:id': onSandbox('sandboxes:write'),
  'DELETE /v1/sandboxes/:id': onSandbox('sandboxes:write'),
  'POST /v1/sandboxes/:id/pause': onSandbox('sandboxes:write'),
  'POST /v1/sandboxes/:id/resume': onSandbox('sandboxes:write'),
  'POST /v1/sandboxes/:id/stop': onSandbox('sandboxes:write'),
  'POST /v1/sandboxes/:id/start': onSandbox('sandboxes:write'),
  'POST /v1/sandboxes/:id/keepalive': onSandbox('sandboxes:write'),
  'POST /v1/sandboxes/:id/reset': onSandbox('sandboxes:write'),
  'POST /v1/sandboxes/:id/fork': { ...onSandbox('sandboxes:write'), creates: true },
  'PUT /v1/sandboxes/:id/network': onSandbox('sandboxes:write'),
  'GET /v1/sandboxes/:id/ports': onSandbox('sandboxes:read', 'read'),
  // A preview URL (and its access token) opens the sandbox's port; `public` changes who may reach it.
  'POST /v1/sandboxes/:id/ports/:port/url': onSandbox('sandboxes:write'),
  'POST /v1/sandboxes/:id/quarantine': onSandbox('sandboxes:write'),
  'POST /v1/sandboxes/:id/quarantine/release': onSandbox('sandboxes:write'),
  'GET /v1/sandboxes/:id/inspect': onSandbox('sandboxes:read', 'read'),
  'GET /v1/sandboxes/:id/metrics': onSandbox('sandboxes:read', 'read'),

  'POST /v1/sandboxes/:id/exec': onSandbox('commands'),
  'POST /v1/sandboxes/:id/exec/stream': onSandbox('commands'),
  'GET /v1/sandboxes/:id/exec/stream': onSandbox('commands'),
  'POST /v1/sandboxes/:id/commands': onSandbox('commands'),
  'GET /v1/sandboxes/:id/commands': onSandbox('commands', 'read'),
  'GET /v1/sandboxes/:id/commands/:commandId': onSandbox('commands', 'read'),
  'GET /v1/sandboxes/:id/commands/:commandId/wait': onSandbox('commands', 'read'),
  'GET /v1/sandboxes/:id/commands/:commandId/stream': onSandbox('commands', 'read'),
  'POST /v1/sandboxes/:id/commands/:commandId/kill': onSandbox('commands'),
  'POST /v1/sandboxes/:id/commands/:commandId/stdin': onSandbox('commands'),
  'POST /v1/sandboxes/:id/commands/:commandId/resize': onSandbox('commands'),

  'GET /v1/sandboxes/:id/files': onSandbox('files', 'read'),
  'GET /v1/sandboxes/:id/files/stat': onSandbox('files', 'read'),
  'GET /v1/sandboxes/:id/files/exists': onSandbox('files', 'read'),
  'GET /v1/sandboxes/:id/files/content': onSandbox('files', 'read'),
  'GET /v1/sandboxes/:id/files/archive': onSandbox('files', 'read'),
  'GET /v1/sandboxes/:id/files/watch': onSandbox('files', 'read'),
  'PUT /v1/sandboxes/:id/files/content': onSandbox('files'),
  'PUT /v1/sandboxes/:id/files/archive': onSandbox('files'),
  'POST /v1/sandboxes/:id/files/mkdir': onSandbox('files'),
  'POST /v1/sandboxes/:id/files/rename': onSandbox('files'),
  'POST /v1/sandboxes/:id/files/chmod': onSandbox('files'),
  'POST /v1/sandboxes/:id/files/batch': onSandbox('files'),
  'DELETE /v1/sandboxes/:id/files': onSandbox('files'),

  'POST /v1/sandboxes/:id/snapshots': onSandbox('snapshots'),
  'GET /v1/snapshots': read('snapshots'),
  'GET /v1/snapshots/:ref': read('snapshots'),
  'DELETE /v1/snapshots/:ref': write('snapshots'),

  'GET /v1/templates': read('templates:read'),
  'GET /v1/templates/:name': read('templates:read'),
  'POST /v1/templates': write('templates:write'),
  'DELETE /v1/templates/:name': write('templates:write'),

  'GET /v1/events': read('events'),
  'GET /v1/events/stream': read('events'),
  'GET /v1/webhooks': read('webhooks'),
  'POST /v1/webhooks': write('webhooks'),
  'DELETE /v1/webhooks/:id': write('webhooks'),

  'GET /v1/keys': read('keys'),
  'POST /v1/keys': write('keys'),
  'DELETE /v1/keys/:id': write('keys'),

  'GET /v1/audit': read('audit'),
  'GET /v1/audit/verify': read('admin'),
  'GET /v1/usage': read('usage'),
  'GET /v1/volumes': read('volumes'),
  'POST /v1/volumes': write('volumes'),
  'GET /v1/volumes/:ref': read('volumes'),
  'POST /v1/volumes/:ref/resize': write('volumes'),
  'DELETE /v1/volumes/:ref': write('volumes'),
  'POST /v1/volumes/:ref/snapshots': write('volumes'),
  'POST /v1/volumes/:ref/fork': write('volumes'),
  'GET /v1/volumes/:ref/files': read('volumes'),
  'GET /v1/volumes/:ref/files/stat': read('volumes'),
  'GET /v1/volumes/:ref/files/content': read('volumes'),
  'PUT /v1/volumes/:ref/files/content': write('volumes'),
  'DELETE /v1/volumes/:ref/files': write('volumes'),
  'PUT /v1/volumes/:ref/files/archive': write('volumes'),
  'GET /v1/volumes/:ref/files/archive': read('volumes'),
  'GET /v1/buckets': read('buckets'),
  'POST /v1/buckets': write('buckets'),
  'DELETE /v1/buckets/:name': write('buckets'),
  // A sync moves files of the sandbox (in or out) with the tenant's bucket credentials, which never reach the key.
  'POST /v1/sandboxes/:id/sync': onSandbox('files'),
  'GET /v1/secrets': read('secrets'),
  'PUT /v1/secrets/:name': write('secrets'),
  'POST /v1/secrets/:name/rotate': write('secrets'),
  'DELETE /v1/secrets/:name': write('secrets'),

  'GET /v1/quota': read('sandboxes:read'),
  'GET /v1/tenants/:tenant/quota': read('sandboxes:read'),
  'PUT /v1/tenants/:tenant/quota': write('admin'),
  'GET /v1/tenants/:tenant/defaults': read('sandboxes:read'),
  'PUT /v1/tenants/:tenant/defaults': write('admin'),
};

/**
 * What route `url` (the pattern, `/v1/sandboxes/:id`) answered for `method` needs.
 * @returns the access, or undefined for a route missing from {@link ROUTE_ACCESS}
 */
export function routeAccess(method: string, url: string): RouteAccess | undefined {
  const key = `${method === 'HEAD' ? 'GET' : method} ${url}`;
  if (ROUTE_ACCESS[key] === undefined && CONSOLE_FILE.test(key)) return CONSOLE_FILE_ACCESS;
  return ROUTE_ACCESS[key];
}

/**
 * A file of the web console (one route per built file, `GET /assets/index-3f2a.js`): a GET of a literal path with a
 * file extension outside the API's prefixes. The console's files hold no data; it reads everything through `/v1`.
 */
const CONSOLE_FILE = /^GET \/(?!v1\/|mcp\b|metrics\b)[\w./-]+\.[\w.]+$/;
const CONSOLE_FILE_ACCESS: RouteAccess = read('public');
