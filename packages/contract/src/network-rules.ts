/**
 * Network policy entries (`allowOut` / `denyOut`): parsing, normalizing and matching, as pure functions without
 * zod, so the contract's schemas, the server's firewall plumbing and its DNS resolver share one reading of an entry.
 *
 * An entry is one of:
 * - an IPv4 CIDR, `a.b.c.d/n`, or a single address `a.b.c.d` (read as `/32`). Dotted decimal only: a leading zero,
 *   hex or a shortened form (`0x7f.1`, `0177.0.0.1`, `2130706433`) is an error, never a second spelling of an
 *   address. Host bits must be zero (`10.0.0.1/8` is an error that names `10.0.0.0/8`). IPv6 entries are errors:
 *   sandboxes get no IPv6 route at all.
 * - a domain, `example.com`: that name only.
 * - a wildcard domain, `*.example.com`: every name below `example.com` at any depth (`a.example.com`,
 *   `a.b.example.com`), not `example.com` itself, as in DNS wildcards and TLS certificates. List both entries to
 *   cover the apex and its subdomains. `*` stands only as the whole first label; `*` alone is an error (use
 *   `0.0.0.0/0`).
 *
 * Names are case-insensitive and a trailing dot is dropped: `Example.COM.` is `example.com`. A label is 1–63 of
 * `a-z`, `0-9`, `-` and `_`, not starting or ending with `-`; a name is at most 253 characters; an
 * internationalized name is written in its `xn--` form. A name whose last label is all digits is read as an
 * (invalid) address, not as a domain.
 */

/** A parsed policy entry. */
export type NetworkRule =
  | {
      type: 'cidr';
      /** The canonical spelling, `a.b.c.d/n`. */
      text: string;
      /** The network address as an unsigned 32-bit integer. */
      network: number;
      /** Prefix length, 0–32. */
      prefixLength: number;
    }
  | {
      type: 'domain';
      /** Canonical spelling: lower case, no trailing dot. */
      text: string;
      /** The one name it matches. */
      name: string;
    }
  | {
      type: 'wildcard';
      /** Canonical spelling, `*.example.com`. */
      text: string;
      /** The name below which every name matches (`example.com`), itself excluded. */
      suffix: string;
    };

/** Result of {@link parseNetworkRule}: the rule, or a message that names the entry and says what to write. */
export type NetworkRuleParse = { ok: true; rule: NetworkRule } | { ok: false; message: string };

/** Most entries one list (`allowOut` or `denyOut`) may hold. */
export const MAX_NETWORK_RULES = 256;

const MAX_NAME_LENGTH = 253;
const LABEL = /^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$/;
const DOTTED_DECIMAL = /^(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})$/;

/**
 * Parse one `allowOut`/`denyOut` entry.
 * @returns `{ ok: true, rule }` with the canonical rule, or `{ ok: false, message }` naming the entry
 * @example
 * parseNetworkRule('*.PyPI.org.') // { ok: true, rule: { type: 'wildcard', text: '*.pypi.org', suffix: 'pypi.org' } }
 */
export function parseNetworkRule(entry: string): NetworkRuleParse {
  const fail = (why: string): NetworkRuleParse => ({ ok: false, message: `network rule "${entry}": ${why}` });
  const trimmed = entry.trim();
  if (trimmed === '') return fail('is empty; write a CIDR (10.0.0.0/8), a domain (example.com) or *.example.com');
  if (trimmed.includes(':')) return fail('IPv6 is not routed for sandboxes; write an IPv4 CIDR or a domain');
  if (trimmed.includes('/') || /^[0-9.]+$/.test(trimmed) || /\.[0-9]+\.?$/.test(trimmed) || /^0x/i.test(trimmed)) {
    return parseCidr(trimmed, fail);
  }
  if (trimmed === '*' || trimmed === '*.') return fail('"*" alone is not a rule; write 0.0.0.0/0 for every address');
  if (trimmed.startsWith('*.')) {
    if (trimmed.slice(2).includes('*'))
      return fail('a wildcard stands only as the whole first label, as in *.example.com');
    const suffix = normalizeDnsName(trimmed.slice(2));
    if (suffix === null) return fail(nameProblem(trimmed.slice(2)));
    return { ok: true, rule: { type: 'wildcard', text: `*.${suffix}`, suffix } };
  }
  if (trimmed.includes('*')) {
    return fail('a wildcard stands only as the whole first label, as in *.example.com');
  }
  const name = normalizeDnsName(trimmed);
  if (name === null) return fail(nameProblem(trimmed));
  return { ok: true, rule: { type: 'domain', text: name, name } };
}

/**
 * The canonical form of a DNS name: lower case, without the trailing dot.
 * @returns the name, or null when it is not a valid host name (see the module's rules; `*` is not allowed)
 */
export function normalizeDnsName(name: string): string | null {
  let lower = name.toLowerCase();
  if (lower.endsWith('.')) lower = lower.slice(0, -1);
  if (lower === '' || lower.length > MAX_NAME_LENGTH) return null;
  const labels = lower.split('.');
  if (!labels.every((label) => LABEL.test(label))) return null;
  if (/^[0-9]+$/.test(labels[labels.length - 1] ?? '')) return null;
  return lower;
}

/**
 * Whether a domain or wildcard rule matches `name` (already normalized with {@link normalizeDnsName}).
 * A CIDR rule matches no name.
 */
export function ruleMatchesName(rule: NetworkRule, name: string): boolean {
  if (rule.type === 'domain') return rule.name === name;
  if (rule.type === 'wildcard') return name.endsWith(`.${rule.suffix}`);
  return false;
}

/**
 * Whether a CIDR rule holds `address` (an IPv4 address in dotted decimal). Domain rules hold no address.
 */
export function ruleMatchesAddress(rule: NetworkRule, address: string): boolean {
  if (rule.type !== 'cidr') return false;
  const value = ipv4ToNumber(address);
  if (value === null) return false;
  return rule.prefixLength === 0 || (value & prefixMask(rule.prefixLength)) >>> 0 === rule.network;
}

/**
 * An IPv4 address in strict dotted decimal as an unsigned 32-bit integer.
 * @returns the number, or null for anything else (leading zeros, hex, fewer than four parts)
 */
export function ipv4ToNumber(address: string): number | null {
  const match = DOTTED_DECIMAL.exec(address);
  if (match === null) return null;
  let value = 0;
  for (const part of match.slice(1)) {
    const octet = Number(part);
    if (octet > 255) return null;
    value = value * 256 + octet;
  }
  return value;
}

/**
 * Every problem of an `allowOut`/`denyOut` list: one message per bad entry (naming it), and one when the list is
 * longer than {@link MAX_NETWORK_RULES}.
 * @returns the messages with the index of the entry they concern (`null` for the list itself); empty when valid
 */
export function networkRuleIssues(entries: readonly string[]): Array<{ index: number | null; message: string }> {
  const issues: Array<{ index: number | null; message: string }> = [];
  if (entries.length > MAX_NETWORK_RULES) {
    issues.push({ index: null, message: `${entries.length} network rules, at most ${MAX_NETWORK_RULES} are allowed` });
  }
  entries.forEach((entry, index) => {
    const parsed = parseNetworkRule(entry);
    if (!parsed.ok) issues.push({ index, message: parsed.message });
  });
  return issues;
}

/** The part of zod's refinement context {@link refineNetworkRules} uses (zod's `ctx` fits it). */
export interface RuleRefinementContext {
  addIssue(issue: { code: 'custom'; message: string; path?: Array<string | number> }): void;
}

/**
 * A zod `superRefine` callback for a list of policy entries: each bad entry becomes an issue at its index.
 * @example
 * const allowOut = z.array(z.string()).superRefine(refineNetworkRules);
 */
export function refineNetworkRules(entries: readonly string[], ctx: RuleRefinementContext): void {
  for (const issue of networkRuleIssues(entries)) {
    ctx.addIssue({ code: 'custom', message: issue.message, ...(issue.index === null ? {} : { path: [issue.index] }) });
  }
}

/** A sandbox's egress policy with its entries parsed, as {@link compileNetworkPolicy} makes it. */
export interface CompiledNetworkPolicy {
  mode: 'egress' | 'none';
  allowOut: NetworkRule[];
  denyOut: NetworkRule[];
}

/**
 * Parse a policy's entries once, for {@link nameAllowed} and address checks.
 * @returns the compiled policy, or the messages of every bad entry (a policy with one is used by nobody: callers
 *   deny everything rather than guess)
 */
export function compileNetworkPolicy(policy: {
  mode: 'egress' | 'none';
  allowOut: readonly string[];
  denyOut: readonly string[];
}): { ok: true; policy: CompiledNetworkPolicy } | { ok: false; messages: string[] } {
  const messages: string[] = [];
  const parse = (entries: readonly string[]): NetworkRule[] =>
    entries.flatMap((entry) => {
      const parsed = parseNetworkRule(entry);
      if (parsed.ok) return [parsed.rule];
      messages.push(parsed.message);
      return [];
    });
  const compiled = { mode: policy.mode, allowOut: parse(policy.allowOut), denyOut: parse(policy.denyOut) };
  return messages.length === 0 ? { ok: true, policy: compiled } : { ok: false, messages };
}

/**
 * Whether a sandbox under `policy` may resolve `name` (normalized with {@link normalizeDnsName}). The resolver
 * answers NXDOMAIN for a name this refuses, without asking any upstream server.
 *
 * In order: mode `none` refuses every name; a domain or wildcard in `allowOut` allows it (allow wins over deny);
 * one in `denyOut` refuses it; a `denyOut` CIDR of the whole IPv4 space (`0.0.0.0/0`) refuses every other name, so
 * `denyOut: ['0.0.0.0/0']` with domains in `allowOut` is an allowlist of names; otherwise the name is allowed.
 * A narrower `denyOut` CIDR refuses no name: which addresses a name has is known only after asking upstream, and the
 * firewall refuses connections to the denied addresses whatever the name.
 */
export function nameAllowed(policy: CompiledNetworkPolicy, name: string): boolean {
  if (policy.mode === 'none') return false;
  if (policy.allowOut.some((rule) => ruleMatchesName(rule, name))) return true;
  if (policy.denyOut.some((rule) => ruleMatchesName(rule, name))) return false;
  if (policy.denyOut.some((rule) => rule.type === 'cidr' && rule.prefixLength === 0)) return false;
  return true;
}

function parseCidr(text: string, fail: (why: string) => NetworkRuleParse): NetworkRuleParse {
  const slash = text.indexOf('/');
  const addressText = slash === -1 ? text : text.slice(0, slash);
  const prefixText = slash === -1 ? '32' : text.slice(slash + 1);
  const address = ipv4ToNumber(addressText);
  if (address === null) {
    return fail('is not an IPv4 address in dotted decimal (four numbers 0-255, no leading zeros, as in 10.0.0.0/8)');
  }
  if (!/^(0|[1-9][0-9]?)$/.test(prefixText) || Number(prefixText) > 32) {
    return fail('has a prefix length outside 0-32');
  }
  const prefixLength = Number(prefixText);
  const network = (address & prefixMask(prefixLength)) >>> 0;
  if (network !== address) {
    return fail(`has host bits set; the network is ${numberToIpv4(network)}/${prefixLength}`);
  }
  return { ok: true, rule: { type: 'cidr', text: `${numberToIpv4(network)}/${prefixLength}`, network, prefixLength } };
}

function prefixMask(prefixLength: number): number {
  return prefixLength === 0 ? 0 : (0xffffffff << (32 - prefixLength)) >>> 0;
}

function numberToIpv4(value: number): string {
  return [value >>> 24, (value >>> 16) & 255, (value >>> 8) & 255, value & 255].join('.');
}

function nameProblem(name: string): string {
  if (/[^\x20-\x7e]/.test(name)) return 'write an internationalized name in its xn-- (punycode) form';
  if (name.length > MAX_NAME_LENGTH + 1) return `is longer than ${MAX_NAME_LENGTH} characters`;
  return 'is not a valid domain (labels of a-z, 0-9, "-" and "_", 1-63 characters, not starting or ending with "-")';
}
