import { GUEST_GATEWAY, ROUTER_GUEST_LINK, ROUTER_TABLE } from './network-rules.js';

/** A TCP endpoint on the host: the egress proxy that substitutes secrets. */
export interface EgressProxyEndpoint {
  /** IPv4 address it listens on, reachable from the routers (the network's host gateway). */
  address: string;
  port: number;
}

/** Name of the router's set of addresses whose HTTP and HTTPS connections go to the egress proxy. */
export const INTERCEPTED_SET = 'intercepted';
/** Destination ports redirected for intercepted addresses. */
export const INTERCEPTED_PORTS = [80, 443] as const;

/**
 * The `nft -f` lines a router's script gets when an egress proxy is set: the `intercepted` set (declared
 * idempotently, so routers made before keep theirs and its timeouts), the redirect of guest TCP 80/443 to those
 * addresses to the proxy (`pre`), and the acceptance of redirected flows before the pool's floor drops them
 * (`egress`). The first element goes before the router's own chain rules, the second after its `pre` DNAT rules,
 * the third at the head of its `egress` chain's accepts.
 */
export function interceptRules(proxy: EgressProxyEndpoint): { declare: string[]; pre: string[]; egress: string[] } {
  const t = `inet ${ROUTER_TABLE}`;
  const ports = `{ ${INTERCEPTED_PORTS.join(', ')} }`;
  return {
    declare: [`table ${t} {`, `  set ${INTERCEPTED_SET} { type ipv4_addr; flags timeout; }`, '}'],
    pre: [
      `add rule ${t} pre iifname "${ROUTER_GUEST_LINK}" ip daddr != ${GUEST_GATEWAY} ip daddr @${INTERCEPTED_SET} tcp dport ${ports} dnat ip to ${proxy.address}:${proxy.port}`,
    ],
    egress: [
      `add rule ${t} egress ct status dnat ip daddr ${proxy.address} tcp dport ${proxy.port} counter name egress accept`,
    ],
  };
}

/**
 * The `nft -f` script that adds `addresses` to a router's intercepted set for `ttlSeconds` (restarting the timeout
 * of one already there): new connections of the guest to them on TCP 80/443 go to the egress proxy.
 */
export function interceptAddressesScript(addresses: readonly string[], ttlSeconds: number): string {
  const t = `inet ${ROUTER_TABLE}`;
  const ttl = Math.max(1, Math.ceil(ttlSeconds));
  const list = addresses.join(', ');
  return [
    `add element ${t} ${INTERCEPTED_SET} { ${list} }`,
    `delete element ${t} ${INTERCEPTED_SET} { ${list} }`,
    `add element ${t} ${INTERCEPTED_SET} { ${addresses.map((a) => `${a} timeout ${ttl}s`).join(', ')} }`,
    '',
  ].join('\n');
}
