import { ErrorCode, SandboxMetricsSchema, SandboxParamsSchema } from '@burrow/contract';
import type { Services } from '../services/services.js';
import { ApiError } from '../util/api-error.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

/** `GET /v1/sandboxes/{id}/metrics`: the CPU, memory and disk samples the server keeps of a sandbox. */
export function registerSandboxMetricsRoutes(app: ZodApp, services: Services): void {
  app.get(
    '/sandboxes/:id/metrics',
    {
      schema: {
        tags: ['sandboxes'],
        summary: 'CPU, memory and disk of a sandbox over the recent past (sampled by the server every few seconds)',
        params: SandboxParamsSchema,
        response: { 200: SandboxMetricsSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => {
      const sandbox = await services.sandboxes.get(principalOf(request), request.params.id);
      if (services.sampler === undefined) {
        throw new ApiError(ErrorCode.unsupported, 'this server samples no sandbox metrics', {
          hint: 'the runtime driver reads no cgroup counters; use GET /v1/sandboxes/{id}/inspect for disk use',
        });
      }
      return services.sampler.metricsOf(sandbox.id, sandbox.resources);
    },
  );
}
