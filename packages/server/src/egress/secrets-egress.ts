import { parseNetworkRule, ruleMatchesAddress } from '@burrow/contract';
import { ALWAYS_DENIED_CIDRS, type SandboxNetworks } from '@burrow/runtime-gvisor';
import type { Logger } from 'pino';
import type { SandboxDns } from '../sandbox-dns.js';
import type { SecretService } from '../services/secret-service.js';
import type { LazyEgressCa } from './egress-ca.js';
import { startEgressProxy } from './egress-proxy.js';

/** Options of {@link startSecretsEgress}. */
export interface SecretsEgressOptions {
  networks: SandboxNetworks;
  dns: SandboxDns;
  secrets: SecretService;
  ca: LazyEgressCa;
  /** CIDRs no sandbox reaches (the operator's `BURROW_NETWORK_NEVER`): their addresses are never proxied to. */
  never: readonly string[];
  /** Extra CA certificates (PEM) for verifying the real hosts (`BURROW_EGRESS_UPSTREAM_CA`). @default none */
  upstreamCa?: readonly string[] | undefined;
  logger: Logger;
}

/** The running secrets-at-egress path. */
export interface SecretsEgress {
  /** Where the routers redirect to (TCP). */
  address: string;
  port: number;
  /** Stop the proxy, the resolver's hook and the host's admission of the proxy. Idempotent. */
  close(): Promise<void>;
}

/**
 * Start secrets at egress (docs/network.md "Secrets at egress"): the egress proxy on the network's host gateway (a
 * free port), routers redirecting to it, and the resolver's hook that, for an A answer to a name bound to a secret
 * the sandbox holds, records the addresses for the proxy and marks them intercepted in the sandbox's router before
 * the answer leaves. Addresses below the floor (always-denied ranges, `never`) are never intercepted: the router
 * drops connections to them as before, and the proxy never connects there on a sandbox's behalf.
 * @throws Error when the proxy cannot listen or the host rules cannot be set
 */
export async function startSecretsEgress(options: SecretsEgressOptions): Promise<SecretsEgress> {
  const floor = [...ALWAYS_DENIED_CIDRS, ...options.never].flatMap((cidr) => {
    const parsed = parseNetworkRule(cidr);
    return parsed.ok ? [parsed.rule] : [];
  });
  const proxy = await startEgressProxy({
    listenAddress: options.networks.hostGateway(),
    port: 0,
    ca: options.ca,
    upstreamCa: options.upstreamCa,
    logger: options.logger,
    sandboxFor: async (source) => (await options.networks.sandboxForSourceAddress(source))?.sandboxId,
    secretsFor: (sandboxId, name) => options.secrets.egressSecrets(sandboxId, name),
  });
  const endpoint = { address: proxy.address, port: proxy.port };
  try {
    const failed = await options.networks.useEgressProxy(endpoint);
    if (failed.length > 0) options.logger.warn({ sandboxIds: failed }, 'routers not redirected to the egress proxy');
  } catch (error) {
    await proxy.close();
    throw error;
  }
  options.dns.setAnswerHook(async (sandboxId, name, addresses, ttlSeconds) => {
    if (!(await options.secrets.intercepts(sandboxId, name))) return;
    const open = addresses.filter((address) => !floor.some((rule) => ruleMatchesAddress(rule, address)));
    if (open.length === 0) return;
    proxy.record(sandboxId, name, open, ttlSeconds);
    await options.networks.interceptAddresses(sandboxId, open, ttlSeconds);
  });
  let closing: Promise<void> | undefined;
  return {
    ...endpoint,
    close() {
      closing ??= (async () => {
        options.dns.setAnswerHook(undefined);
        await proxy.close();
        await options.networks.forgetEgressProxy(endpoint).catch((error: unknown) => {
          options.logger.warn({ err: error }, 'removing the egress proxy endpoint from the host rules failed');
        });
      })();
      return closing;
    },
  };
}
