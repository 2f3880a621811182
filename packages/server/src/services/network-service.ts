import type {
  NetworkMode,
  NetworkPolicy,
  NetworkPolicyRequestParsed,
  NetworkUsage,
  Sandbox,
  SandboxNetwork,
} from '@burrow/contract';
import { ErrorCode } from '@burrow/contract';
import type { RuntimeDriver } from '@burrow/runtime';
import type { Logger } from 'pino';
import type { SandboxRecord, SandboxStore } from '../store/sandbox-store.js';
import { ApiError } from '../util/api-error.js';
import { type Clock, isoNow } from '../util/clock.js';
import type { KeyedMutex } from '../util/keyed-mutex.js';

/** The operator's network settings (main.ts reads them from the environment). */
export interface NetworkSettings {
  /** Mode of a sandbox whose create request names none (`BURROW_NETWORK_DEFAULT`). @default 'egress' */
  defaultMode: NetworkMode;
}

/** The policy of a sandbox with no network: nothing passes. */
export const NETWORK_NONE: NetworkPolicy = { mode: 'none', allowOut: [], denyOut: [] };

/**
 * The policy a request asks for: its own fields, with the mode it names, or else `fallbackMode` (the server's
 * default on create, the sandbox's current mode on an update).
 */
export function resolveNetworkPolicy(
  request: NetworkPolicyRequestParsed | undefined,
  fallbackMode: NetworkMode,
): NetworkPolicy {
  return {
    mode: request?.mode ?? fallbackMode,
    allowOut: request?.allowOut ?? [],
    denyOut: request?.denyOut ?? [],
    ...(request?.egressMbps === undefined ? {} : { egressMbps: request.egressMbps }),
  };
}

/** The API view of a sandbox's network. Rows from before the network column had none. */
export function networkView(record: SandboxRecord, usage?: NetworkUsage | null): SandboxNetwork {
  const policy = record.network ?? NETWORK_NONE;
  return {
    mode: policy.mode,
    allowOut: policy.allowOut,
    denyOut: policy.denyOut,
    egressMbps: policy.egressMbps ?? null,
    ...(usage === undefined || usage === null ? {} : { usage }),
  };
}

/** Dependencies of {@link NetworkService}. */
export interface NetworkServiceDeps {
  sandboxes: SandboxStore;
  driver: RuntimeDriver;
  mutex: KeyedMutex;
  clock: Clock;
  logger: Logger;
}

/** Runtime changes of a sandbox's network policy. */
export class NetworkService {
  constructor(private readonly deps: NetworkServiceDeps) {}

  /**
   * Replace the network policy of sandbox `id`: applied on the host in one nftables transaction (whole or not at
   * all; new connections follow it within a second), then stored, so it survives restarts, pause, fork and
   * snapshots. A sandbox without a network on the host now (paused after a reboot, stopped) gets it at its next
   * start.
   * @returns the sandbox as stored
   * @throws ApiError `sandbox_not_found`; `invalid_request` when the sandbox has no network of its own (the server
   *   runs without networking) or is being deleted; `runtime_error` when the host refuses the rules (nothing changed)
   */
  async update(
    tenantId: string,
    id: string,
    request: NetworkPolicyRequestParsed,
    view: (record: SandboxRecord) => Sandbox,
  ): Promise<Sandbox> {
    return this.deps.mutex.run(id, async () => {
      const record = await this.deps.sandboxes.get(tenantId, id);
      if (record === null || record.state === 'deleted') {
        throw new ApiError(ErrorCode.sandboxNotFound, `no sandbox ${id}`, {
          hint: 'list your sandboxes with `burrow sandbox ls` (GET /v1/sandboxes)',
        });
      }
      if (record.state === 'deleting') {
        throw new ApiError(ErrorCode.invalidRequest, `sandbox ${id} is being deleted; its network cannot change`);
      }
      const driver = this.deps.driver;
      if (driver.updateNetwork === undefined || !driver.capabilities.has('network')) {
        throw new ApiError(ErrorCode.invalidRequest, 'this server gives sandboxes no network', {
          hint: 'the operator enables networking on the server (it needs nftables on the host)',
        });
      }
      const policy = resolveNetworkPolicy(request, (record.network ?? NETWORK_NONE).mode);
      try {
        await driver.updateNetwork(id, policy);
      } catch (error) {
        // No network on the host now: the stored policy applies when the sandbox next starts or resumes.
        if (!/has no network on this host/.test((error as Error).message)) {
          throw new ApiError(
            ErrorCode.runtimeError,
            `the host refused the network policy: ${(error as Error).message}`,
            {
              hint: 'nothing changed; retry, and if it keeps failing the server log has the details',
              cause: error,
            },
          );
        }
      }
      const updated = await this.deps.sandboxes.update(
        tenantId,
        id,
        record.version,
        { network: policy },
        isoNow(this.deps.clock),
      );
      if (updated === null) throw new ApiError(ErrorCode.conflict, `sandbox ${id} changed meanwhile; retry`);
      this.deps.logger.info({ sandboxId: id, network: policy }, 'network policy updated');
      return view(updated);
    });
  }
}
