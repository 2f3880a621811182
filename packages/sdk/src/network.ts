import type { NetworkPolicyRequest, Sandbox as SandboxInfo, SandboxNetwork } from '@burrow/contract';
import { SandboxParser } from './contract-wire.js';
import type { HttpClient } from './http-client.js';

/**
 * The network policy of one sandbox (`sandbox.network`): which destinations it may open connections to
 * (docs/network.md).
 */
export class Network {
  readonly #http: HttpClient;
  readonly #sandboxId: string;
  readonly #onInfo: (info: SandboxInfo) => void;

  /** @internal */
  constructor(http: HttpClient, sandboxId: string, onInfo: (info: SandboxInfo) => void) {
    this.#http = http;
    this.#sandboxId = sandboxId;
    this.#onInfo = onInfo;
  }

  /**
   * Replace the sandbox's network policy, whole and atomically (`PUT /v1/sandboxes/{id}/network`); new connections
   * follow it within a second. `mode` left out keeps the current mode; `allowOut` and `denyOut` left out are empty.
   * @param policy `mode` (`egress` | `none`), `allowOut` and `denyOut` (IPv4 CIDRs or domains `example.com`,
   *   `*.example.com`; at most 256 together; `allowOut` wins), `egressMbps` (Mbit/s)
   * @returns the sandbox's network as the server now has it
   * @throws `InvalidRequestError` naming a malformed entry (nothing changes); `SandboxNotFoundError`
   * @example
   * ```ts
   * await sandbox.network.update({ denyOut: ['0.0.0.0/0'], allowOut: ['pypi.org', '*.pythonhosted.org'] });
   * ```
   */
  async update(policy: NetworkPolicyRequest): Promise<SandboxNetwork | undefined> {
    const info = await this.#http.json(
      SandboxParser,
      'PUT',
      `/sandboxes/${encodeURIComponent(this.#sandboxId)}/network`,
      {
        json: policy,
      },
    );
    this.#onInfo(info);
    return info.network;
  }
}
