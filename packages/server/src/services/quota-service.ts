import type { Quota, QuotaLimits } from '@burrow/contract';
import { ErrorCode } from '@burrow/contract';
import type { QuotaStore } from '../store/quota-store.js';
import { ApiError } from '../util/api-error.js';
import { type Clock, isoNow } from '../util/clock.js';
import type { Principal } from './key-service.js';

/** Tenant quotas: what a tenant may use and uses; admins set them. Enforcement lives in the store's writes. */
export class QuotaService {
  constructor(private readonly deps: { quotas: QuotaStore; clock: Clock }) {}

  /** The caller's tenant's limits and usage. */
  async get(caller: Principal, tenantId: string = caller.tenantId): Promise<Quota> {
    if (tenantId !== caller.tenantId && caller.role !== 'admin') throw forbidden();
    const [limits, usage] = await Promise.all([this.deps.quotas.limits(tenantId), this.deps.quotas.usage(tenantId)]);
    return { tenantId, limits, usage };
  }

  /**
   * Replace `tenantId`'s limits (admin keys only). Lowering a limit below the usage refuses new work; it never
   * deletes anything.
   * @throws ApiError `forbidden` for a non-admin key
   */
  async set(caller: Principal, tenantId: string, limits: QuotaLimits): Promise<Quota> {
    if (caller.role !== 'admin') throw forbidden();
    await this.deps.quotas.setLimits(tenantId, limits, isoNow(this.deps.clock));
    return this.get(caller, tenantId);
  }
}

function forbidden(): ApiError {
  return new ApiError(ErrorCode.forbidden, 'only admin keys manage quotas of other tenants', {
    hint: 'use the admin key (<dataDir>/admin-key)',
  });
}
