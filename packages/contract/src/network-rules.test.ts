import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  type CompiledNetworkPolicy,
  compileNetworkPolicy,
  ipv4ToNumber,
  MAX_NETWORK_RULES,
  nameAllowed,
  networkRuleIssues,
  normalizeDnsName,
  parseNetworkRule,
  refineNetworkRules,
  ruleMatchesAddress,
  ruleMatchesName,
} from './network-rules.js';

function rule(entry: string) {
  const parsed = parseNetworkRule(entry);
  if (!parsed.ok) throw new Error(parsed.message);
  return parsed.rule;
}

function policy(allowOut: string[], denyOut: string[], mode: 'egress' | 'none' = 'egress'): CompiledNetworkPolicy {
  const compiled = compileNetworkPolicy({ mode, allowOut, denyOut });
  if (!compiled.ok) throw new Error(compiled.messages.join('; '));
  return compiled.policy;
}

describe('parseNetworkRule', () => {
  it.each([
    ['10.0.0.0/8', { type: 'cidr', text: '10.0.0.0/8', network: 0x0a000000, prefixLength: 8 }],
    ['0.0.0.0/0', { type: 'cidr', text: '0.0.0.0/0', network: 0, prefixLength: 0 }],
    ['198.18.0.7', { type: 'cidr', text: '198.18.0.7/32', network: 0xc6120007, prefixLength: 32 }],
    [' 255.255.255.255/32 ', { type: 'cidr', text: '255.255.255.255/32', network: 0xffffffff, prefixLength: 32 }],
    ['Example.COM.', { type: 'domain', text: 'example.com', name: 'example.com' }],
    ['_dmarc.example.com', { type: 'domain', text: '_dmarc.example.com', name: '_dmarc.example.com' }],
    ['*.PyPI.org', { type: 'wildcard', text: '*.pypi.org', suffix: 'pypi.org' }],
    ['*.test', { type: 'wildcard', text: '*.test', suffix: 'test' }],
    ['xn--bcher-kva.example', { type: 'domain', text: 'xn--bcher-kva.example', name: 'xn--bcher-kva.example' }],
  ])('reads %s', (entry, expected) => {
    expect(parseNetworkRule(entry)).toEqual({ ok: true, rule: expected });
  });

  it.each([
    ['', /is empty/],
    ['10.0.0.1/8', /host bits set; the network is 10\.0\.0\.0\/8/],
    ['10.0.0.0/33', /prefix length/],
    ['10.0.0.0/08', /prefix length/],
    ['256.0.0.0/8', /dotted decimal/],
    ['0177.0.0.1', /dotted decimal/],
    ['0x7f.0.0.1', /dotted decimal/],
    ['0x7f000001', /dotted decimal/],
    ['2130706433', /dotted decimal/],
    ['127.1', /dotted decimal/],
    ['169.254.169.254.', /dotted decimal/],
    ['::ffff:169.254.169.254', /IPv6/],
    ['fd00::/8', /IPv6/],
    ['*', /"\*" alone/],
    ['foo.*.com', /whole first label/],
    ['*foo.com', /whole first label/],
    ['*.*.example.com', /whole first label/],
    ['example.*', /whole first label/],
    ['-bad.example.com', /not a valid domain/],
    ['a..b', /not a valid domain/],
    ['bücher.example', /xn--/],
    [`${'a'.repeat(64)}.com`, /not a valid domain/],
    [`${'abcdefghi.'.repeat(26)}com`, /longer than 253/],
    ['exa mple.com', /not a valid domain/],
  ])('refuses %j naming it', (entry, why) => {
    const parsed = parseNetworkRule(entry);
    expect(parsed.ok).toBe(false);
    if (parsed.ok) return;
    expect(parsed.message).toContain(`"${entry}"`);
    expect(parsed.message).toMatch(why);
  });
});

describe('matching', () => {
  it('a domain matches only itself, a wildcard every name below it and not its apex', () => {
    expect(ruleMatchesName(rule('example.com'), 'example.com')).toBe(true);
    expect(ruleMatchesName(rule('example.com'), 'www.example.com')).toBe(false);
    expect(ruleMatchesName(rule('*.example.com'), 'www.example.com')).toBe(true);
    expect(ruleMatchesName(rule('*.example.com'), 'a.b.example.com')).toBe(true);
    expect(ruleMatchesName(rule('*.example.com'), 'example.com')).toBe(false);
    expect(ruleMatchesName(rule('*.example.com'), 'badexample.com')).toBe(false);
    expect(ruleMatchesName(rule('10.0.0.0/8'), 'example.com')).toBe(false);
  });

  it('a CIDR holds the addresses of its network only', () => {
    expect(ruleMatchesAddress(rule('10.0.0.0/8'), '10.255.1.2')).toBe(true);
    expect(ruleMatchesAddress(rule('10.0.0.0/8'), '11.0.0.0')).toBe(false);
    expect(ruleMatchesAddress(rule('0.0.0.0/0'), '203.0.113.9')).toBe(true);
    expect(ruleMatchesAddress(rule('198.18.0.7'), '198.18.0.7')).toBe(true);
    expect(ruleMatchesAddress(rule('198.18.0.7'), '198.18.0.8')).toBe(false);
    expect(ruleMatchesAddress(rule('10.0.0.0/8'), '010.0.0.1')).toBe(false);
    expect(ruleMatchesAddress(rule('example.com'), '10.0.0.1')).toBe(false);
  });

  it('normalizes names and refuses what is no host name', () => {
    expect(normalizeDnsName('WWW.Example.Com.')).toBe('www.example.com');
    expect(normalizeDnsName('.')).toBeNull();
    expect(normalizeDnsName('1.2.3.4')).toBeNull();
    expect(normalizeDnsName('*.example.com')).toBeNull();
    expect(ipv4ToNumber('1.2.3.4')).toBe(0x01020304);
    expect(ipv4ToNumber('1.2.3')).toBeNull();
  });
});

describe('nameAllowed', () => {
  it.each<[string, string[], string[], 'egress' | 'none', string, boolean]>([
    ['default egress allows any name', [], [], 'egress', 'anything.example', true],
    ['mode none refuses every name', ['example.com'], [], 'none', 'example.com', false],
    ['a denied domain is refused', [], ['evil.com'], 'egress', 'evil.com', false],
    ['a denied wildcard leaves its apex', [], ['*.evil.com'], 'egress', 'evil.com', true],
    ['a denied wildcard refuses below', [], ['*.evil.com'], 'egress', 'x.evil.com', false],
    ['allow wins over deny', ['ok.evil.com'], ['*.evil.com'], 'egress', 'ok.evil.com', true],
    ['allowlist: allowed name', ['pypi.org'], ['0.0.0.0/0'], 'egress', 'pypi.org', true],
    ['allowlist: other name', ['pypi.org'], ['0.0.0.0/0'], 'egress', 'evil.com', false],
    ['allowlist: wildcard below', ['*.pypi.org'], ['0.0.0.0/0'], 'egress', 'files.pypi.org', true],
    ['a narrow CIDR deny refuses no name', [], ['203.0.113.0/24'], 'egress', 'x.example', true],
    ['an allowOut CIDR allows no name by itself', ['198.18.0.0/15'], ['0.0.0.0/0'], 'egress', 'a.test', false],
  ])('%s', (_title, allowOut, denyOut, mode, name, expected) => {
    expect(nameAllowed(policy(allowOut, denyOut, mode), name)).toBe(expected);
  });

  it('a policy with a bad entry does not compile, and says which', () => {
    expect(compileNetworkPolicy({ mode: 'egress', allowOut: ['ok.com', 'x.*'], denyOut: ['1.2.3.4/40'] })).toEqual({
      ok: false,
      messages: [expect.stringContaining('"x.*"'), expect.stringContaining('"1.2.3.4/40"')],
    });
  });
});

describe('refineNetworkRules', () => {
  const schema = z.array(z.string()).superRefine(refineNetworkRules);

  it('puts each bad entry at its index and accepts good lists', () => {
    expect(schema.safeParse(['example.com', '*.example.com', '10.0.0.0/8']).success).toBe(true);
    const result = schema.safeParse(['example.com', 'foo.*.com']);
    expect(result.success).toBe(false);
    expect(result.error?.issues).toEqual([
      expect.objectContaining({ path: [1], message: expect.stringContaining('"foo.*.com"') }),
    ]);
  });

  it('refuses more than the most rules', () => {
    const many = Array.from({ length: MAX_NETWORK_RULES + 1 }, (_, i) => `h${i}.example.com`);
    expect(networkRuleIssues(many)).toEqual([{ index: null, message: expect.stringContaining('at most 256') }]);
    expect(schema.safeParse(many).success).toBe(false);
    expect(networkRuleIssues(many.slice(1))).toEqual([]);
  });
});
