import { AuditListSchema, AuditVerifySchema, ErrorCode, ListAuditQuerySchema } from '@burrow/contract';
import type { AuditService } from '../services/audit-service.js';
import type { Services } from '../services/services.js';
import { ApiError } from '../util/api-error.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

function auditOf(services: Services): AuditService {
  if (services.audit === undefined) throw new ApiError(ErrorCode.unsupported, 'this server keeps no audit log');
  return services.audit;
}

/** `GET /v1/audit` (filters, cursor) and `GET /v1/audit/verify`. */
export function registerAuditRoutes(app: ZodApp, services: Services): void {
  const tags = ['audit'];
  app.get(
    '/audit',
    {
      schema: {
        tags,
        summary:
          'Audit records, oldest first: every request that changed something or was refused (admin: every tenant)',
        querystring: ListAuditQuerySchema,
        response: { 200: AuditListSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => auditOf(services).list(principalOf(request), request.query),
  );
  app.get(
    '/audit/verify',
    {
      schema: {
        tags,
        summary: 'Check the audit hash chain; names every removed or edited record (admin keys)',
        response: { 200: AuditVerifySchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => auditOf(services).verify(principalOf(request)),
  );
}
