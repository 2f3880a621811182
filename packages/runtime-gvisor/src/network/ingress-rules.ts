import { GUEST_ADDRESS, HOST_LINK_PREFIX, ROUTER_GUEST_LINK, ROUTER_UPLINK } from './network-rules.js';

/** nftables chains of the router's table that carry ingress (the server's preview proxy reaching guest ports). */
export const INGRESS_PRE_CHAIN = 'ingress_pre';
export const INGRESS_FORWARD_CHAIN = 'ingress_forward';
/** nftables table of the host that keeps ingress to the sandboxes for root's processes (the server). */
export const INGRESS_HOST_TABLE = 'burrow_ingress';

/** Input of {@link ingressRouterRules}. */
export interface IngressRulesInput {
  /** The router's table, `inet <name>`. */
  table: string;
  /** The sandbox's uplink address: where the host connects to reach a guest port. */
  uplinkAddress: string;
  /** The only source ingress is taken from: the pool's host gateway (the host's address on every sandbox link). */
  hostGateway: string;
}

/**
 * Lines of a router's `nft -f` script that forward TCP connections from the host to the sandbox's uplink address
 * on to the guest's fixed address, same port: the server's preview proxy connects to `<uplink>:<port>` and reaches
 * whatever listens on `<port>` inside. Only the host gateway may open them; both directions of such a connection
 * pass whatever the egress policy says (mode `none` included), since they are the host's own connections.
 *
 * The chains are declared with `add chain` (a no-op when present), so routers made before them get them on their
 * next apply. {@link ingressJumps} are the rules of the router's own chains that lead here.
 */
export function ingressRouterRules(input: IngressRulesInput): string[] {
  const t = input.table;
  return [
    `add chain ${t} ${INGRESS_PRE_CHAIN}`,
    `add chain ${t} ${INGRESS_FORWARD_CHAIN}`,
    `flush chain ${t} ${INGRESS_PRE_CHAIN}`,
    `flush chain ${t} ${INGRESS_FORWARD_CHAIN}`,
    `add rule ${t} ${INGRESS_PRE_CHAIN} iifname "${ROUTER_UPLINK}" ip saddr ${input.hostGateway} ip daddr ${input.uplinkAddress} meta l4proto tcp dnat ip to ${GUEST_ADDRESS}`,
    `add rule ${t} ${INGRESS_FORWARD_CHAIN} iifname "${ROUTER_UPLINK}" oifname "${ROUTER_GUEST_LINK}" ct status dnat ct original ip saddr ${input.hostGateway} ct original ip daddr ${input.uplinkAddress} accept`,
    `add rule ${t} ${INGRESS_FORWARD_CHAIN} iifname "${ROUTER_GUEST_LINK}" oifname "${ROUTER_UPLINK}" ct status dnat ct original ip saddr ${input.hostGateway} ct original ip daddr ${input.uplinkAddress} accept`,
  ];
}

/** The rules that send the router's `pre` and `forward` traffic through the ingress chains first. */
export function ingressJumps(table: string): { pre: string; forward: string } {
  return {
    pre: `add rule ${table} pre jump ${INGRESS_PRE_CHAIN}`,
    forward: `add rule ${table} forward jump ${INGRESS_FORWARD_CHAIN}`,
  };
}

/**
 * The host's ingress table: a connection the host opens toward a sandbox link (`bw*`) is dropped unless its
 * process runs as root, so a local unprivileged user cannot reach sandbox ports around the preview proxy's access
 * check. Replies and the resolver's answers are not new connections and pass. Re-applying is idempotent.
 */
export function ingressHostRules(): string {
  const t = `inet ${INGRESS_HOST_TABLE}`;
  return `${[
    `table ${t} {`,
    '  chain output { type filter hook output priority filter; policy accept; }',
    '}',
    `flush chain ${t} output`,
    `add rule ${t} output oifname "${HOST_LINK_PREFIX}*" ct state new meta skuid != 0 drop`,
  ].join('\n')}\n`;
}
