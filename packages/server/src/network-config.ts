import { type NetworkMode, parseNetworkRule } from '@burrow/contract';
import { type DnsUpstream, hostDnsUpstreams, parseDnsUpstreams } from './node/dns-upstreams.js';

/** The server's network settings (docs/network.md "Operator settings"). */
export interface NetworkConfig {
  /** Mode of sandboxes whose create request names none. @default 'egress' (BURROW_NETWORK_DEFAULT) */
  defaultMode: NetworkMode;
  /** IPv4 CIDRs no sandbox may reach, whatever its `allowOut`. @default [] (BURROW_NETWORK_NEVER, comma-separated) */
  never: string[];
  /** Egress limit of sandboxes whose policy names none, Mbit/s; null: none. @default null (BURROW_NETWORK_EGRESS_MBPS) */
  egressMbps: number | null;
  /**
   * Where the sandboxes' resolver listens (UDP) and guest DNS goes. @default null: the sandbox pool's host gateway
   * (10.231.0.1) on a free port of this server's own, so servers on one host never share one
   * (BURROW_NETWORK_RESOLVER=ADDRESS:PORT fixes it)
   */
  resolver: { address: string; port: number } | null;
  /**
   * Servers the resolver forwards allowed queries to, in order; empty: the host names none and sandboxes get no
   * DNS (every query SERVFAIL). @default the host's `/etc/resolv.conf` nameservers
   * (BURROW_DNS_UPSTREAM=ip[:port][,ip[:port]])
   */
  dnsUpstreams: DnsUpstream[];
  /**
   * A PEM file of CA certificates the egress proxy trusts, beside Node's bundled roots, when it verifies the real
   * hosts of secrets (a private API's own CA). @default none (BURROW_EGRESS_UPSTREAM_CA=PATH)
   */
  egressUpstreamCaPath?: string | null | undefined;
}

/**
 * The network settings from `env`, or null when networking is off (`BURROW_NETWORK=off`: every sandbox runs
 * with runsc's `--network=none`).
 * @param readResolvConf returns the host's `/etc/resolv.conf` text (called only without BURROW_DNS_UPSTREAM; a
 *   throw or a text without nameservers leaves the upstream list empty)
 * @throws RangeError naming the variable for a malformed value
 */
export function networkConfigFrom(
  env: Readonly<Record<string, string | undefined>>,
  readResolvConf: () => string = () => '',
): NetworkConfig | null {
  if (['off', '0', 'false'].includes(env.BURROW_NETWORK ?? '')) return null;
  const defaultMode = env.BURROW_NETWORK_DEFAULT || 'egress';
  if (defaultMode !== 'egress' && defaultMode !== 'none') {
    throw new RangeError(`BURROW_NETWORK_DEFAULT must be egress or none, got ${defaultMode}`);
  }
  const never = (env.BURROW_NETWORK_NEVER ?? '')
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '');
  for (const entry of never) {
    if (!isCidr(entry)) {
      throw new RangeError(`BURROW_NETWORK_NEVER holds "${entry}", which is not an IPv4 CIDR`);
    }
  }
  const mbps = env.BURROW_NETWORK_EGRESS_MBPS ?? '';
  const egressMbps = mbps === '' ? null : Number(mbps);
  if (egressMbps !== null && !(Number.isInteger(egressMbps) && egressMbps > 0)) {
    throw new RangeError(`BURROW_NETWORK_EGRESS_MBPS must be a positive integer, got ${mbps}`);
  }
  const resolverText = env.BURROW_NETWORK_RESOLVER ?? '';
  let resolver: NetworkConfig['resolver'] = null;
  if (resolverText !== '') {
    const match = /^(\d{1,3}(?:\.\d{1,3}){3}):(\d{1,5})$/.exec(resolverText);
    const port = Number(match?.[2]);
    if (match?.[1] === undefined || !isCidr(match[1]) || !(port > 0 && port < 65_536)) {
      throw new RangeError(`BURROW_NETWORK_RESOLVER must be IPV4:PORT, got ${resolverText}`);
    }
    resolver = { address: match[1], port };
  }
  const upstreamText = env.BURROW_DNS_UPSTREAM ?? '';
  let dnsUpstreams: DnsUpstream[];
  if (upstreamText.trim() !== '') {
    dnsUpstreams = parseDnsUpstreams(upstreamText);
  } else {
    try {
      dnsUpstreams = hostDnsUpstreams(readResolvConf());
    } catch {
      dnsUpstreams = [];
    }
  }
  const egressUpstreamCaPath = env.BURROW_EGRESS_UPSTREAM_CA || null;
  return { defaultMode, never, egressMbps, resolver, dnsUpstreams, egressUpstreamCaPath };
}

function isCidr(entry: string): boolean {
  const parsed = parseNetworkRule(entry);
  return parsed.ok && parsed.rule.type === 'cidr';
}
