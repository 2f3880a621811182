import { type NetworkPolicy, parseNetworkRule } from '@burrow/contract';
import { ingressJumps, ingressRouterRules } from './ingress-rules.js';

/** The guest's own address, the same in every sandbox: a checkpoint restored, forked or moved needs no change. */
export const GUEST_ADDRESS = '192.168.127.2';
/** The guest's gateway and DNS server (its /etc/resolv.conf names it): the router's side of the guest link. */
export const GUEST_GATEWAY = '192.168.127.1';
/** Prefix length of the guest link. */
export const GUEST_PREFIX_LENGTH = 30;
/** MAC of the guest's interface and of the router's side, fixed so a restored neighbour cache stays right. */
export const GUEST_MAC = '02:42:c0:a8:7f:02';
export const GATEWAY_MAC = '02:42:c0:a8:7f:01';
/** Interface names inside the sandbox's own namespaces (only the host-side link needs a unique name). */
export const GUEST_LINK = 'eth0';
export const ROUTER_GUEST_LINK = 'gw0';
export const ROUTER_UPLINK = 'up0';
/** Name prefix of every sandbox's host-side link (`bw` + 13 hex): the host's rules match it. */
export const HOST_LINK_PREFIX = 'bw';
/** nftables table of each router namespace, and of the host. */
export const ROUTER_TABLE = 'burrow';
export const HOST_TABLE = 'burrow_host';

/**
 * Destinations denied unless an `allowOut` CIDR names them: "this network", RFC 1918, CGNAT (100.64/10), loopback,
 * link-local (cloud metadata at 169.254.169.254), IETF protocol assignments, multicast, reserved and broadcast.
 */
export const ALWAYS_DENIED_CIDRS = [
  '0.0.0.0/8',
  '10.0.0.0/8',
  '100.64.0.0/10',
  '127.0.0.0/8',
  '169.254.0.0/16',
  '172.16.0.0/12',
  '192.0.0.0/24',
  '192.168.0.0/16',
  '224.0.0.0/4',
  '240.0.0.0/4',
] as const;

/** A UDP endpoint on the host: the sandboxes' DNS resolver. */
export interface ResolverEndpoint {
  /** IPv4 address the resolver listens on, reachable from the routers (the network's host gateway by default). */
  address: string;
  port: number;
}

/** Input of {@link routerRules}. */
export interface RouterRulesInput {
  policy: NetworkPolicy;
  /** The sandbox's own address on the host side (its router's uplink; unique per sandbox). */
  uplinkAddress: string;
  resolver: ResolverEndpoint;
  /** CIDRs no policy opens: the operator's floor, the sandboxes' address pool. */
  never: readonly string[];
  /** Declare the table and its objects first (the first apply); later applies keep counters and resolved addresses. */
  declare: boolean;
  /** The pool's host gateway: the source of the host's connections to guest ports (see `ingressRouterRules`). */
  hostGateway: string;
  /**
   * Lines of the egress proxy's redirect (`interceptRules` in egress-intercept-rules.ts): declarations, `pre` rules
   * after the DNS translation, `egress` rules before the floor. @default none: nothing is redirected
   */
  intercept?: { declare: string[]; pre: string[]; egress: string[] } | undefined;
}

/** IPv4 dotted quad → unsigned 32-bit number. */
export function ipv4ToNumber(address: string): number {
  return address.split('.').reduce((acc, octet) => acc * 256 + Number(octet), 0);
}

/** Unsigned 32-bit number → IPv4 dotted quad. */
export function numberToIpv4(value: number): string {
  return [24, 16, 8, 0].map((shift) => Math.floor(value / 2 ** shift) % 256).join('.');
}

/** `203.0.113.7/24` → `203.0.113.0/24` (nftables refuses host bits in an interval). */
export function normalizeCidr(cidr: string): string {
  const [address, prefix] = cidr.split('/') as [string, string | undefined];
  const length = prefix === undefined ? 32 : Number(prefix);
  const size = 2 ** (32 - length);
  return `${numberToIpv4(Math.floor(ipv4ToNumber(address) / size) * size)}/${length}`;
}

/** The CIDR entries of a rule list, normalised; domains are the resolver's. */
export function cidrsOf(entries: readonly string[]): string[] {
  const cidrs: string[] = [];
  for (const entry of entries) {
    const parsed = parseNetworkRule(entry);
    if (parsed.ok && parsed.rule.type === 'cidr') cidrs.push(parsed.rule.text);
  }
  return cidrs;
}

function elements(cidrs: readonly string[]): string {
  return cidrs.length === 0 ? '' : `{ ${cidrs.join(', ')} }`;
}

/**
 * The `nft -f` script that sets a router namespace's rules for `policy`, applied as one transaction: the static
 * sets and chains are flushed and written again, while the named counters and the set of addresses the resolver
 * handed out (`resolved`, with their timeouts) are kept.
 *
 * Egress (guest → uplink), first match wins: IPv6 dropped; DNS to the gateway, translated to the resolver, passes
 * (mode `egress`); `never` dropped; DNS to anything else dropped; established flows pass; `allowOut` CIDRs pass;
 * always-denied ranges dropped; resolved addresses pass; `denyOut` CIDRs dropped; anything else passes. Mode
 * `none` drops all. Ingress passes only replies. The router itself accepts nothing from the guest.
 */
export function routerRules(input: RouterRulesInput): string {
  const { policy, resolver } = input;
  const t = `inet ${ROUTER_TABLE}`;
  const lines: string[] = [];
  if (input.declare) {
    lines.push(
      `table ${t} {`,
      '  counter egress {}',
      '  counter ingress {}',
      '  set resolved { type ipv4_addr; flags timeout; }',
      ...['never', 'allow', 'deny', 'denied_always'].map(
        (name) => `  set ${name} { type ipv4_addr; flags interval; auto-merge; }`,
      ),
      '  chain pre { type nat hook prerouting priority dstnat; policy accept; }',
      '  chain post { type nat hook postrouting priority srcnat; policy accept; }',
      '  chain input { type filter hook input priority filter; policy drop; }',
      '  chain forward { type filter hook forward priority filter; policy drop; }',
      '  chain egress {}',
      '}',
    );
  }
  const intercept = input.intercept;
  if (intercept !== undefined) lines.push(...intercept.declare);
  for (const set of ['never', 'allow', 'deny', 'denied_always']) lines.push(`flush set ${t} ${set}`);
  for (const chain of ['pre', 'post', 'input', 'forward', 'egress']) lines.push(`flush chain ${t} ${chain}`);
  const sets: Record<string, string[]> = {
    never: input.never.map(normalizeCidr),
    allow: policy.mode === 'egress' ? cidrsOf(policy.allowOut) : [],
    deny: cidrsOf(policy.denyOut),
    denied_always: [...ALWAYS_DENIED_CIDRS],
  };
  for (const [name, cidrs] of Object.entries(sets)) {
    if (cidrs.length > 0) lines.push(`add element ${t} ${name} ${elements(cidrs)}`);
  }
  lines.push(...ingressRouterRules({ table: t, uplinkAddress: input.uplinkAddress, hostGateway: input.hostGateway }));
  const dns = `${resolver.address}:${resolver.port}`;
  const ingress = ingressJumps(t);
  lines.push(
    ingress.pre,
    ingress.forward,
    `add rule ${t} pre iifname "${ROUTER_GUEST_LINK}" ip daddr ${GUEST_GATEWAY} udp dport 53 dnat ip to ${dns}`,
    ...(intercept?.pre ?? []),
    `add rule ${t} post oifname "${ROUTER_UPLINK}" snat ip to ${input.uplinkAddress}`,
    `add rule ${t} input ct state established,related accept`,
    `add rule ${t} input iifname "lo" accept`,
    `add rule ${t} forward iifname "${ROUTER_UPLINK}" oifname "${ROUTER_GUEST_LINK}" ct state established,related counter name ingress accept`,
    `add rule ${t} forward iifname "${ROUTER_GUEST_LINK}" oifname "${ROUTER_UPLINK}" jump egress`,
  );
  const egress = (rule: string): void => {
    lines.push(`add rule ${t} egress ${rule}`);
  };
  egress('meta nfproto ipv6 drop');
  if (policy.mode === 'none') {
    egress('drop');
    return `${lines.join('\n')}\n`;
  }
  egress(`ct status dnat ip daddr ${resolver.address} udp dport ${resolver.port} counter name egress accept`);
  lines.push(...(intercept?.egress ?? []));
  egress('ip daddr @never drop');
  egress('udp dport 53 drop');
  egress('tcp dport 53 drop');
  egress('ct state established,related counter name egress accept');
  egress('ip daddr @allow counter name egress accept');
  // Resolved addresses pass only above the floor: an allowed name that resolves to 169.254.169.254 or RFC 1918
  // (DNS rebinding) stays blocked unless an allowOut CIDR names the range.
  egress('ip daddr @denied_always drop');
  egress('ip daddr @resolved counter name egress accept');
  egress('ip daddr @deny drop');
  egress('counter name egress accept');
  return `${lines.join('\n')}\n`;
}

/** Input of {@link hostRules}. */
export interface HostRulesInput {
  /** The sandboxes' address pool, for example `10.231.0.0/16`. */
  poolCidr: string;
  resolver: ResolverEndpoint;
}

/**
 * The host's rules for every sandbox link (`bw*`), shared by every Burrow instance on the host: nothing from a
 * sandbox reaches the host itself (any of its addresses, any port) except the resolver; no sandbox reaches another;
 * sandbox traffic leaving the host is masqueraded. Re-applying is idempotent; resolver endpoints accumulate.
 */
export function hostRules(input: HostRulesInput): string {
  const t = `inet ${HOST_TABLE}`;
  const links = `"${HOST_LINK_PREFIX}*"`;
  return `${[
    `table ${t} {`,
    '  set resolvers { type ipv4_addr . inet_proto . inet_service; }',
    '  chain input { type filter hook input priority filter - 10; policy accept; }',
    '  chain forward { type filter hook forward priority filter - 10; policy accept; }',
    '  chain post { type nat hook postrouting priority srcnat; policy accept; }',
    '}',
    `flush chain ${t} input`,
    `flush chain ${t} forward`,
    `flush chain ${t} post`,
    `add element ${t} resolvers { ${input.resolver.address} . udp . ${input.resolver.port} }`,
    `add rule ${t} input iifname ${links} ip daddr . meta l4proto . th dport @resolvers accept`,
    `add rule ${t} input iifname ${links} ct state established,related accept`,
    `add rule ${t} input iifname ${links} drop`,
    `add rule ${t} forward iifname ${links} oifname ${links} drop`,
    `add rule ${t} forward iifname ${links} meta nfproto ipv6 drop`,
    `add rule ${t} post ip saddr ${input.poolCidr} oifname != ${links} masquerade`,
  ].join('\n')}\n`;
}
