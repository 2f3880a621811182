import { isIPv4, isIPv6 } from 'node:net';
import { z } from 'zod';

/** An upstream DNS server the sandbox resolver forwards allowed queries to. */
export interface DnsUpstream {
  /** IPv4 or IPv6 address. */
  address: string;
  /** UDP and TCP port. */
  port: number;
}

const upstreamEntry = z
  .string()
  .trim()
  .transform((entry, ctx): DnsUpstream => {
    const bracketed = /^\[([0-9a-fA-F:.]+)\](?::([0-9]+))?$/.exec(entry);
    const v4 = /^([0-9.]+)(?::([0-9]+))?$/.exec(entry);
    const [, address = '', portText] = bracketed ?? v4 ?? [undefined, entry, undefined];
    const port = portText === undefined ? 53 : Number(portText);
    if (!(isIPv4(address) || (isIPv6(address) && (bracketed !== null || portText === undefined)))) {
      ctx.addIssue({
        code: 'custom',
        message: `DNS upstream "${entry}" is not IP[:PORT] (for example 192.0.2.53, 192.0.2.53:5353 or [2001:db8::53]:53)`,
      });
      return z.NEVER;
    }
    if (!Number.isInteger(port) || port < 1 || port > 65_535) {
      ctx.addIssue({ code: 'custom', message: `DNS upstream "${entry}" has a port outside 1-65535` });
      return z.NEVER;
    }
    return { address, port };
  });

const upstreamList = z
  .string()
  .transform((value) => value.split(',').filter((entry) => entry.trim() !== ''))
  .pipe(z.array(upstreamEntry).min(1, 'name at least one DNS upstream').max(8, 'at most 8 DNS upstreams'));

/**
 * Read `BURROW_DNS_UPSTREAM`: `ip[:port][,ip[:port]]...`, IPv6 in brackets when it has a port (`[2001:db8::53]:53`).
 * The port defaults to 53.
 * @returns the upstreams in the order given (the resolver asks them in that order)
 * @throws RangeError naming the bad entry, for an empty list, a malformed address or a port outside 1-65535
 * @example
 * parseDnsUpstreams('198.18.0.2,10.0.0.53:5353') // [{ address: '198.18.0.2', port: 53 }, { address: '10.0.0.53', port: 5353 }]
 */
export function parseDnsUpstreams(value: string): DnsUpstream[] {
  const parsed = upstreamList.safeParse(value);
  if (!parsed.success) {
    throw new RangeError(`BURROW_DNS_UPSTREAM: ${parsed.error.issues.map((issue) => issue.message).join('; ')}`);
  }
  return parsed.data;
}

/**
 * The host's resolvers from the text of `/etc/resolv.conf`: every `nameserver` line, in order, port 53 (a scoped
 * IPv6 address, `fe80::1%eth0`, is skipped: the resolver's sockets are not bound to that interface).
 * @returns the upstreams
 * @throws RangeError when the text names no usable nameserver
 * @example
 * hostDnsUpstreams(await readFile('/etc/resolv.conf', 'utf8'))
 */
export function hostDnsUpstreams(resolvConf: string): DnsUpstream[] {
  const upstreams: DnsUpstream[] = [];
  for (const line of resolvConf.split('\n')) {
    const match = /^\s*nameserver\s+(\S+)/.exec(line);
    const address = match?.[1];
    if (address === undefined || address.includes('%')) continue;
    if (isIPv4(address) || isIPv6(address)) upstreams.push({ address, port: 53 });
  }
  if (upstreams.length === 0) {
    throw new RangeError('/etc/resolv.conf names no nameserver; set BURROW_DNS_UPSTREAM=ip[:port][,ip[:port]]');
  }
  return upstreams;
}
