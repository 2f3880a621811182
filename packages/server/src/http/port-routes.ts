import {
  ErrorCode,
  PortListSchema,
  PortUrlRequestSchema,
  PortUrlSchema,
  SandboxParamsSchema,
  SandboxPortParamsSchema,
} from '@burrow/contract';
import type { PortService } from '../services/port-service.js';
import { ApiError } from '../util/api-error.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

/**
 * `GET /sandboxes/{id}/ports` (listening ports inside) and `POST /sandboxes/{id}/ports/{port}/url` (a preview URL,
 * public or private, signed or not). Without `ports` (the OpenAPI writer) the routes answer `unsupported`.
 */
export function registerPortRoutes(app: ZodApp, ports: PortService | undefined): void {
  const service = (): PortService => {
    if (ports === undefined) throw new ApiError(ErrorCode.unsupported, 'this server has no preview URLs');
    return ports;
  };
  app.get(
    '/sandboxes/:id/ports',
    {
      schema: {
        tags: ['sandboxes'],
        summary:
          'TCP ports listening inside the sandbox, with their preview URLs (a paused sandbox resumes unless ' +
          'autoResume is false)',
        params: SandboxParamsSchema,
        response: { 200: PortListSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => service().list(principalOf(request), request.params.id),
  );
  app.post(
    '/sandboxes/:id/ports/:port/url',
    {
      schema: {
        tags: ['sandboxes'],
        summary:
          'A preview URL of a sandbox port: http://<port>-<sandbox label>.<previewDomain>:<serverPort>/. `public` ' +
          'makes the port public (or private again); `signed` returns a URL that works without the access token ' +
          'until `expiresAt`',
        params: SandboxPortParamsSchema,
        body: PortUrlRequestSchema,
        response: { 200: PortUrlSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => service().url(principalOf(request), request.params.id, request.params.port, request.body),
  );
}
