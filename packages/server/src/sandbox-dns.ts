import type { SandboxNetworks } from '@burrow/runtime-gvisor';
import type { Logger } from 'pino';
import type { NetworkConfig } from './network-config.js';
import { startSandboxResolver } from './node/sandbox-resolver.js';

/** The sandboxes' DNS resolver as the server runs it. */
export interface SandboxDns {
  /** Where it listens (UDP); guest DNS to the gateway is translated here. */
  address: string;
  port: number;
  /** Stop answering and stop admitting sandbox links to the endpoint on the host. Idempotent. */
  close(): Promise<void>;
  /**
   * Call `hook` with every A answer a sandbox gets, after its addresses opened in the firewall and before the answer
   * leaves (secrets at egress redirect the names bound to them); a rejection answers SERVFAIL. Undefined removes it.
   */
  setAnswerHook(hook: ResolvedHook | undefined): void;
}

/** See {@link SandboxDns.setAnswerHook}. */
export type ResolvedHook = (sandboxId: string, name: string, addresses: string[], ttlSeconds: number) => Promise<void>;

/**
 * Prepare the host for the sandboxes' networks and start their resolver on it (docs/network.md "DNS"): it listens
 * on the configured endpoint or, by default, the pool's host gateway on a free port of this server's own (servers
 * on one host never compete for a port), and the routers of existing sandboxes are pointed at it. Queries are
 * answered under the policy of the sandbox behind the source address; the addresses of allowed answers open in that
 * sandbox's firewall for their TTL.
 * @throws Error when the host cannot be prepared (nftables missing, not root) or the endpoint cannot be bound
 */
export async function startSandboxDns(
  networks: SandboxNetworks,
  config: NetworkConfig | null | undefined,
  logger: Logger,
): Promise<SandboxDns> {
  await networks.prepareHost().catch((error: unknown) => {
    throw new Error(
      `preparing sandbox networking failed (${(error as Error).message}); install nftables or set BURROW_NETWORK=off`,
      { cause: error },
    );
  });
  const upstreams = config?.dnsUpstreams ?? [];
  if (upstreams.length === 0) {
    logger.warn('no DNS upstream (the host names no nameserver): sandboxes resolve no names; set BURROW_DNS_UPSTREAM');
  }
  let answerHook: ResolvedHook | undefined;
  const resolver = await startSandboxResolver({
    listenAddress: networks.resolver.address,
    port: config?.resolver?.port ?? 0,
    upstreams,
    logger,
    policyFor: async (sourceAddress) => {
      const found = await networks.sandboxForSourceAddress(sourceAddress);
      if (found === undefined) return undefined;
      const { mode, allowOut, denyOut } = found.policy;
      return { sandboxId: found.sandboxId, mode, allowOut, denyOut };
    },
    onResolved: async (sandboxId, addresses, ttlSeconds, name) => {
      await networks.allowResolvedAddresses(sandboxId, addresses, ttlSeconds);
      await answerHook?.(sandboxId, name, addresses, ttlSeconds);
    },
  });
  const endpoint = { address: resolver.address, port: resolver.port };
  try {
    const failed = await networks.useResolver(endpoint);
    if (failed.length > 0) logger.warn({ sandboxIds: failed }, 'routers not pointed at the resolver until restart');
  } catch (error) {
    await resolver.close();
    throw error;
  }
  let closing: Promise<void> | undefined;
  return {
    ...endpoint,
    setAnswerHook: (hook) => {
      answerHook = hook;
    },
    close: () => {
      closing ??= (async () => {
        await resolver.close();
        await networks.forgetResolver(endpoint).catch((error: unknown) => {
          logger.warn({ err: error }, 'removing the resolver endpoint from the host rules failed');
        });
      })();
      return closing;
    },
  };
}
