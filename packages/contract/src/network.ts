import { z } from 'zod';
import { MAX_NETWORK_RULES, refineNetworkRules } from './network-rules.js';

/** Largest per-sandbox egress limit, Mbit/s (100 Gbit/s). */
export const MAX_EGRESS_MBPS = 100_000;

/** A rule list: each entry an IPv4 CIDR or a domain, read by {@link parseNetworkRule} (network-rules.ts). */
const RuleListSchema = z.array(z.string().max(260)).superRefine(refineNetworkRules);

/** Refuses more than {@link MAX_NETWORK_RULES} entries in `allowOut` and `denyOut` together. */
function refineRuleCount(
  policy: { allowOut: readonly string[]; denyOut: readonly string[] },
  ctx: z.RefinementCtx,
): void {
  const count = policy.allowOut.length + policy.denyOut.length;
  if (count > MAX_NETWORK_RULES) {
    ctx.addIssue({
      code: 'custom',
      path: ['allowOut'],
      message: `${count} rules in allowOut and denyOut together; at most ${MAX_NETWORK_RULES} are allowed`,
    });
  }
}

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
  .superRefine(refineRuleCount)
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
  .superRefine(refineRuleCount)
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
