import { ErrorCode, UsageQuerySchema, UsageReportSchema } from '@burrow/contract';
import type { Services } from '../services/services.js';
import { ApiError } from '../util/api-error.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

/** `GET /v1/usage`. */
export function registerUsageRoutes(app: ZodApp, services: Services): void {
  app.get(
    '/usage',
    {
      schema: {
        tags: ['usage'],
        summary:
          'Usage over a window from the event log: running seconds × vCPU and × GiB memory, paused/stopped × GiB disk, snapshot GiB-seconds; grouped by sandbox, label:KEY or day',
        querystring: UsageQuerySchema,
        response: { 200: UsageReportSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => {
      if (services.usage === undefined) throw new ApiError(ErrorCode.unsupported, 'this server meters no usage');
      return services.usage.report(principalOf(request), request.query);
    },
  );
}
