import { NetworkPolicyRequestSchema, SandboxParamsSchema, SandboxSchema } from '@burrow/contract';
import type { Services } from '../services/services.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

/** `PUT /sandboxes/{id}/network`: replace a sandbox's network policy at runtime (docs/network.md). */
export function registerNetworkRoutes(app: ZodApp, services: Services): void {
  app.put(
    '/sandboxes/:id/network',
    {
      schema: {
        tags: ['sandboxes'],
        summary:
          "Replace the sandbox's network policy (whole, atomically; new connections follow it within a second). A " +
          'mode left out keeps the current one',
        params: SandboxParamsSchema,
        body: NetworkPolicyRequestSchema,
        response: { 200: SandboxSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) =>
      services.network.update(principalOf(request).tenantId, request.params.id, request.body, (record) =>
        services.sandboxes.view(record),
      ),
  );
}
