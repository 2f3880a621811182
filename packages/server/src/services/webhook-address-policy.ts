import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { BlockList, isIP } from 'node:net';
import { ErrorCode } from '@burrow/contract';
import { ApiError } from '../util/api-error.js';

/**
 * Addresses a webhook is never sent to unless the operator allows internal targets: loopback, private (RFC 1918,
 * unique-local), link-local (cloud metadata at 169.254.169.254), carrier-grade NAT, "this network", multicast and
 * reserved ranges, for IPv4 and IPv6 (IPv4-mapped IPv6 addresses are checked as the IPv4 they carry).
 */
const INTERNAL = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  INTERNAL.addSubnet(net, prefix, 'ipv4');
}
for (const [net, prefix] of [
  ['::', 128],
  ['::1', 128],
  ['64:ff9b:1::', 48],
  ['fc00::', 7],
  ['fe80::', 10],
  ['fec0::', 10],
  ['ff00::', 8],
] as const) {
  INTERNAL.addSubnet(net, prefix, 'ipv6');
}

/** Whether `address` (an IPv4 or IPv6 literal) is internal; anything that is not an IP literal counts as internal. */
export function isInternalAddress(address: string): boolean {
  const bare = address.startsWith('[') && address.endsWith(']') ? address.slice(1, -1) : address;
  const family = isIP(bare);
  if (family === 0) return true;
  if (family === 6) {
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(bare);
    if (mapped?.[1] !== undefined) return INTERNAL.check(mapped[1], 'ipv4');
    // The hex form of an IPv4-mapped address (::ffff:7f00:1).
    const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(bare);
    if (hex?.[1] !== undefined && hex[2] !== undefined) {
      const hi = Number.parseInt(hex[1], 16);
      const lo = Number.parseInt(hex[2], 16);
      return INTERNAL.check(`${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`, 'ipv4');
    }
    return INTERNAL.check(bare, 'ipv6');
  }
  return INTERNAL.check(bare, 'ipv4');
}

/** The error a delivery or registration to an internal address fails with (`code` is stable for logs). */
export class InternalAddressError extends Error {
  readonly code = 'EWEBHOOKINTERNAL';
  constructor(
    readonly host: string,
    readonly address: string,
  ) {
    super(`${host} resolves to ${address}, an internal address; webhooks are not sent there`);
    this.name = 'InternalAddressError';
  }
}

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A `lookup` for `http.request` that resolves like `dns.lookup` and fails with {@link InternalAddressError} when
 * any address the host resolves to is internal: the connection goes to an address this check saw, so a DNS answer
 * that changes between registration and delivery (rebinding) cannot reach an internal address.
 */
export function guardedLookup(
  hostname: string,
  options: { all?: boolean; family?: number | string } | number,
  callback: LookupCallback,
): void {
  const opts = typeof options === 'number' ? { family: options } : options;
  dnsLookup(hostname, { family: Number(opts.family ?? 0) as 0 | 4 | 6, all: true }, (error, addresses) => {
    if (error) {
      callback(error, opts.all ? [] : '', 0);
      return;
    }
    const internal = addresses.find((a) => isInternalAddress(a.address));
    if (internal !== undefined) {
      callback(new InternalAddressError(hostname, internal.address), opts.all ? [] : '', 0);
      return;
    }
    const first = addresses[0];
    if (opts.all) callback(null, addresses);
    else callback(null, first?.address ?? '', first?.family ?? 4);
  });
}

/**
 * Refuse a webhook URL whose host is, or resolves to, an internal address ({@link isInternalAddress}). A host
 * that does not resolve now is accepted: every delivery checks again ({@link guardedLookup}).
 * @param options.resolveTimeoutMs longest wait for DNS. @default 3000
 * @throws ApiError `webhook_url_forbidden`
 */
export async function checkWebhookUrl(url: string, options: { resolveTimeoutMs?: number } = {}): Promise<void> {
  const host = new URL(url).hostname;
  const bare = host.startsWith('[') ? host.slice(1, -1) : host;
  let addresses: string[];
  if (isIP(bare) !== 0) {
    addresses = [bare];
  } else {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<string[]>((resolve) => {
      timer = setTimeout(() => resolve([]), options.resolveTimeoutMs ?? 3000);
    });
    const resolved = new Promise<string[]>((resolve) => {
      dnsLookup(bare, { all: true }, (error, found) => resolve(error ? [] : found.map((a) => a.address)));
    });
    addresses = await Promise.race([resolved, timeout]).finally(() => clearTimeout(timer));
  }
  const internal = addresses.find((a) => isInternalAddress(a));
  if (internal !== undefined) {
    throw new ApiError(
      ErrorCode.webhookUrlForbidden,
      internal === bare
        ? `the webhook URL's host ${host} is an internal address (loopback, private, link-local or reserved)`
        : `the webhook URL's host ${host} resolves to ${internal}, an internal address (loopback, private, link-local or reserved)`,
      {
        hint: 'use a publicly reachable URL; an operator can allow internal targets with BURROW_WEBHOOK_ALLOW_PRIVATE=1',
        details: { host, address: internal },
      },
    );
  }
}

/**
 * POST `body` to `url` with `headers`, never following redirects.
 * @param options.allowInternal send to internal addresses too (the operator's choice); otherwise an internal IP
 *   literal or a host resolving to one fails with {@link InternalAddressError} before any connection
 * @returns the response status
 * @throws InternalAddressError, or the network error
 */
export async function postWebhook(
  url: string,
  headers: Record<string, string>,
  body: string,
  options: { allowInternal: boolean; timeoutMs: number },
): Promise<number> {
  const target = new URL(url);
  const bare = target.hostname.startsWith('[') ? target.hostname.slice(1, -1) : target.hostname;
  if (!options.allowInternal && isIP(bare) !== 0 && isInternalAddress(bare)) {
    throw new InternalAddressError(target.hostname, bare);
  }
  const send = target.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise<number>((resolve, reject) => {
    const req = send(
      target,
      {
        method: 'POST',
        headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
        timeout: options.timeoutMs,
        ...(options.allowInternal ? {} : { lookup: guardedLookup as unknown as typeof dnsLookup }),
      },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer within ${options.timeoutMs} ms`)));
    req.on('error', reject);
    req.end(body);
  });
}
