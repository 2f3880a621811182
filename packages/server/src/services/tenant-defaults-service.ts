import type { TenantDefaults, TenantPolicyDefaults } from '@burrow/contract';
import { ErrorCode } from '@burrow/contract';
import { type PolicyDefaults, resolvePolicies, type TenantPolicySettings } from '../lifecycle/policy-defaults.js';
import type { TenantDefaultsStore } from '../store/tenant-defaults-store.js';
import { ApiError } from '../util/api-error.js';
import { type Clock, isoNow } from '../util/clock.js';
import type { Principal } from './key-service.js';

/**
 * Per-tenant lifecycle policy defaults: admins set them, every key of the tenant reads them, and create applies
 * them between the request and the server defaults.
 */
export class TenantDefaultsService {
  constructor(
    private readonly deps: { store: TenantDefaultsStore; serverDefaults: Readonly<PolicyDefaults>; clock: Clock },
  ) {}

  /** What `tenantId`'s admin set ({} when nothing). */
  settings(tenantId: string): Promise<TenantPolicySettings> {
    return this.deps.store.get(tenantId);
  }

  /**
   * The tenant's defaults: what was set, what a create naming no policy gets, and the source of each.
   * @throws ApiError `forbidden` for another tenant's key that is not an admin key
   */
  async get(caller: Principal, tenantId: string = caller.tenantId): Promise<TenantDefaults> {
    if (tenantId !== caller.tenantId && caller.role !== 'admin') throw forbidden('read');
    const set = await this.deps.store.get(tenantId);
    const { policies, sources } = resolvePolicies({}, this.deps.serverDefaults, set);
    return {
      tenantId,
      set: set as TenantPolicyDefaults,
      effective: policies,
      sources: sources as TenantDefaults['sources'],
    };
  }

  /**
   * Replace `tenantId`'s defaults (admin keys only). Only new sandboxes get them; existing ones keep their policies.
   * @throws ApiError `forbidden` for a non-admin key; `invalid_request` when the default max age is above the limit
   */
  async set(caller: Principal, tenantId: string, settings: TenantPolicyDefaults): Promise<TenantDefaults> {
    if (caller.role !== 'admin') throw forbidden('set');
    const limit = settings.maxAgeLimitMs;
    if (limit !== undefined && settings.maxAgeMs !== undefined && (settings.maxAgeMs ?? Infinity) > limit) {
      throw new ApiError(
        ErrorCode.invalidRequest,
        `the default maxAgeMs (${settings.maxAgeMs ?? 'none'}) is above this tenant's maxAgeLimitMs (${limit})`,
        { hint: 'set maxAgeMs at or below maxAgeLimitMs, or leave it out (it then defaults to the limit)' },
      );
    }
    await this.deps.store.set(tenantId, settings, isoNow(this.deps.clock));
    return this.get(caller, tenantId);
  }
}

function forbidden(what: 'read' | 'set'): ApiError {
  return new ApiError(
    ErrorCode.forbidden,
    what === 'set' ? 'only admin keys set tenant policy defaults' : "only admin keys read another tenant's defaults",
    { hint: 'use the admin key (<dataDir>/admin-key)' },
  );
}
