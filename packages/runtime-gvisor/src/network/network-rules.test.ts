import { describe, expect, it } from 'vitest';
import { cidrsOf, normalizeCidr, routerRules } from './network-rules.js';

const RESOLVER = { address: '10.231.0.1', port: 5353 };

describe('network rules (pure)', () => {
  it('normalises host bits away and keeps domains out of the CIDR sets', () => {
    expect(normalizeCidr('203.0.113.77/24')).toBe('203.0.113.0/24');
    expect(normalizeCidr('0.0.0.0/0')).toBe('0.0.0.0/0');
    expect(cidrsOf(['example.com', '198.51.100.9', '10.0.0.0/8', '*.example.org'])).toEqual([
      '198.51.100.9/32',
      '10.0.0.0/8',
    ]);
  });

  it('egress: allowOut before the always-denied ranges and denyOut; DNS only to the resolver; IPv6 dropped', () => {
    const script = routerRules({
      policy: { mode: 'egress', allowOut: ['10.9.0.0/16'], denyOut: ['0.0.0.0/0'] },
      uplinkAddress: '10.231.0.9',
      resolver: RESOLVER,
      never: ['10.231.0.0/16'],
      declare: true,
      hostGateway: '10.231.0.1',
    });
    const egress = script.split('\n').filter((line) => line.startsWith('add rule inet burrow egress '));
    const at = (needle: string) => egress.findIndex((line) => line.includes(needle));
    expect(at('nfproto ipv6 drop')).toBe(0);
    expect(at('@never drop')).toBeLessThan(at('@allow'));
    expect(at('udp dport 53 drop')).toBeLessThan(at('@allow'));
    expect(at('@allow')).toBeLessThan(at('@denied_always'));
    expect(at('@denied_always')).toBeLessThan(at('@deny drop'));
    // DNS rebinding: a resolved address inside an always-denied range stays blocked.
    expect(at('@denied_always')).toBeLessThan(at('@resolved'));
    expect(at('@resolved')).toBeLessThan(at('@deny drop'));
    expect(script).toContain('add element inet burrow allow { 10.9.0.0/16 }');
    expect(script).toContain('add element inet burrow deny { 0.0.0.0/0 }');
    expect(script).toContain('dnat ip to 10.231.0.1:5353');
    expect(script).toContain('snat ip to 10.231.0.9');
  });

  it('none: every packet from the guest is dropped, DNS included; a later apply keeps counters and resolved addresses', () => {
    const script = routerRules({
      policy: { mode: 'none', allowOut: ['1.2.3.4'], denyOut: [] },
      uplinkAddress: '10.231.0.9',
      resolver: RESOLVER,
      never: [],
      declare: false,
      hostGateway: '10.231.0.1',
    });
    const egress = script.split('\n').filter((line) => line.startsWith('add rule inet burrow egress '));
    expect(egress.map((line) => line.replace('add rule inet burrow egress ', ''))).toEqual([
      'meta nfproto ipv6 drop',
      'drop',
    ]);
    expect(script).not.toContain('table inet burrow {');
    expect(script).not.toContain('flush set inet burrow resolved');
    expect(script).not.toContain('allow { 1.2.3.4');
  });

  it('ingress: the host gateway reaches guest ports ahead of the egress policy, mode none included', () => {
    const script = routerRules({
      policy: { mode: 'none', allowOut: [], denyOut: [] },
      uplinkAddress: '10.231.0.9',
      resolver: RESOLVER,
      never: [],
      declare: false,
      hostGateway: '10.231.0.1',
    });
    const lines = script.split('\n');
    const first = (chain: string) => lines.find((line) => line.startsWith(`add rule inet burrow ${chain} `));
    expect(first('pre')).toBe('add rule inet burrow pre jump ingress_pre');
    expect(first('forward')).toBe('add rule inet burrow forward jump ingress_forward');
    // Declared before the jumps that name them, so routers made without them get them on the next apply.
    expect(lines.indexOf('add chain inet burrow ingress_pre')).toBeLessThan(lines.indexOf(first('pre') ?? ''));
    expect(script).toContain(
      'ingress_pre iifname "up0" ip saddr 10.231.0.1 ip daddr 10.231.0.9 meta l4proto tcp dnat ip to 192.168.127.2',
    );
    expect(lines.filter((line) => line.includes('ingress_forward') && line.endsWith('accept'))).toHaveLength(2);
  });
});
