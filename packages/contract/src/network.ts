import { z } from 'zod';

/** Most entries `allowOut` and `denyOut` may hold together. */
export const MAX_NETWORK_RULES = 256;

/** Largest per-sandbox egress limit, Mbit/s (100 Gbit/s). */
export const MAX_EGRESS_MBPS = 100_000;

const IPV4_OCTET = '(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)';
const IPV4_CIDR = new RegExp(`^${IPV4_OCTET}(\\.${IPV4_OCTET}){3}(/(3[0-2]|[12]?\\d))?$`);
const LABEL = '[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?';
const DOMAIN = new RegExp(`^(\\*\\.)?(${LABEL}\\.)+[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`);

/** One egress rule entry, classified. */
export type NetworkRuleEntry =
  | { kind: 'cidr'; address: string; prefixLength: number }
  | { kind: 'domain'; domain: string; wildcard: boolean };

/**
 * Classify a rule entry: an IPv4 address or CIDR (`203.0.113.7`, `203.0.113.0/24`), a domain (`example.com`) or
 * a wildcard domain (`*.example.com`, every name below example.com, not example.com itself). Domains are matched
 * case-insensitively and returned in lowercase.
 * @returns null for anything else (IPv6, a wildcard in another place, a malformed address or name)
 */
export function parseNetworkRule(entry: string): NetworkRuleEntry | null {
  if (IPV4_CIDR.test(entry)) {
    const [address, prefix] = entry.split('/') as [string, string | undefined];
    return { kind: 'cidr', address, prefixLength: prefix === undefined ? 32 : Number(prefix) };
  }
  const lower = entry.toLowerCase().replace(/\.$/, '');
  if (lower.length <= 253 && DOMAIN.test(lower) && !/^[\d.]+$/.test(lower.replace(/^\*\./, ''))) {
    return lower.startsWith('*.')
      ? { kind: 'domain', domain: lower.slice(2), wildcard: true }
      : { kind: 'domain', domain: lower, wildcard: false };
  }
  return null;
}

const RuleListSchema = z.array(z.string().max(260)).superRefine((entries, ctx) => {
  entries.forEach((entry, index) => {
    if (parseNetworkRule(entry) === null) {
      ctx.addIssue({
        code: 'custom',
        path: [index],
        message:
          `"${entry}" is neither an IPv4 CIDR (203.0.113.0/24) nor a domain (example.com, *.example.com); ` +
          'IPv6 is not supported',
      });
    }
  });
});

/** `mode`: `egress` lets the sandbox open connections out under its rules; `none` gives it no network at all. */
export const NetworkModeSchema = z.enum(['egress', 'none']);
export type NetworkMode = z.infer<typeof NetworkModeSchema>;

/**
 * A sandbox's network policy. Entries are IPv4 CIDRs or domains (`example.com`, `*.example.com`); `allowOut` wins
 * over `denyOut`, so `denyOut: ['0.0.0.0/0']` with an `allowOut` list is an allowlist. Loopback, the host, other
 * sandboxes, private and link-local ranges, CGNAT and multicast are denied unless an `allowOut` CIDR names them
 * (the host and other sandboxes stay denied whatever the policy says). See docs/network.md.
 */
export const NetworkPolicySchema = z
  .object({
    mode: NetworkModeSchema,
    /** Destinations always allowed (wins over `denyOut` and the always-denied ranges). @default [] */
    allowOut: RuleListSchema.default([]),
    /** Destinations denied. @default [] */
    denyOut: RuleListSchema.default([]),
    /** Egress bandwidth limit, Mbit/s. @default the server's `BURROW_NETWORK_EGRESS_MBPS` (none when unset) */
    egressMbps: z.number().int().min(1).max(MAX_EGRESS_MBPS).optional(),
  })
  .strict()
  .superRefine((policy, ctx) => {
    const count = policy.allowOut.length + policy.denyOut.length;
    if (count > MAX_NETWORK_RULES) {
      ctx.addIssue({
        code: 'custom',
        path: ['allowOut'],
        message: `${count} rules in allowOut and denyOut together; at most ${MAX_NETWORK_RULES} are allowed`,
      });
    }
  })
  .meta({ id: 'NetworkPolicy' });
export type NetworkPolicy = z.output<typeof NetworkPolicySchema>;
export type NetworkPolicyInput = z.input<typeof NetworkPolicySchema>;

/**
 * A network policy as a request gives it (create's `network`, the body of `PUT /v1/sandboxes/{id}/network`): like
 * {@link NetworkPolicySchema} with `mode` optional (absent: the server's default on create, the current mode on an
 * update). An update replaces the whole policy, applied atomically.
 */
export const NetworkPolicyRequestSchema = z
  .object({
    mode: NetworkModeSchema.optional(),
    allowOut: RuleListSchema.default([]),
    denyOut: RuleListSchema.default([]),
    egressMbps: z.number().int().min(1).max(MAX_EGRESS_MBPS).optional(),
  })
  .strict()
  .superRefine((policy, ctx) => {
    const count = policy.allowOut.length + policy.denyOut.length;
    if (count > MAX_NETWORK_RULES) {
      ctx.addIssue({
        code: 'custom',
        path: ['allowOut'],
        message: `${count} rules in allowOut and denyOut together; at most ${MAX_NETWORK_RULES} are allowed`,
      });
    }
  })
  .meta({ id: 'NetworkPolicyRequest' });
export type NetworkPolicyRequest = z.input<typeof NetworkPolicyRequestSchema>;
export type NetworkPolicyRequestParsed = z.output<typeof NetworkPolicyRequestSchema>;

/** Bytes the sandbox sent and received over its network since its network was made (its router's counters). */
export const NetworkUsageSchema = z
  .object({
    egressBytes: z.number().int().nonnegative(),
    ingressBytes: z.number().int().nonnegative(),
  })
  .meta({ id: 'NetworkUsage' });
export type NetworkUsage = z.infer<typeof NetworkUsageSchema>;

/** A sandbox's network as the API shows it: the policy in force and, on a single sandbox, its byte counts. */
export const SandboxNetworkSchema = z
  .object({
    mode: NetworkModeSchema,
    allowOut: z.array(z.string()),
    denyOut: z.array(z.string()),
    /** Egress limit, Mbit/s; null: none. */
    egressMbps: z.number().int().nullable(),
    /** Bytes through the sandbox's network (`GET /v1/sandboxes/{id}` only; absent when it has none on the host). */
    usage: NetworkUsageSchema.optional(),
  })
  .meta({ id: 'SandboxNetwork' });
export type SandboxNetwork = z.infer<typeof SandboxNetworkSchema>;
