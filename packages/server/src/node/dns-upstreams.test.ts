import { describe, expect, it } from 'vitest';
import { hostDnsUpstreams, parseDnsUpstreams } from './dns-upstreams.js';

describe('parseDnsUpstreams', () => {
  it('reads ip[:port] lists, port 53 by default, IPv6 in brackets with a port', () => {
    expect(parseDnsUpstreams('198.18.0.2')).toEqual([{ address: '198.18.0.2', port: 53 }]);
    expect(parseDnsUpstreams(' 198.18.0.2:5353, 10.0.0.53 ,[2001:db8::53]:54,2001:db8::1')).toEqual([
      { address: '198.18.0.2', port: 5353 },
      { address: '10.0.0.53', port: 53 },
      { address: '2001:db8::53', port: 54 },
      { address: '2001:db8::1', port: 53 },
    ]);
  });

  it.each([
    ['', /at least one/],
    [' , ', /at least one/],
    ['1.2.3', /"1\.2\.3" is not IP\[:PORT\]/],
    ['example.com', /"example\.com" is not IP\[:PORT\]/],
    [':53', /":53" is not IP\[:PORT\]/],
    ['1.2.3.4:0', /port outside 1-65535/],
    ['1.2.3.4:70000', /port outside 1-65535/],
    ['1.2.3.4:53,999.1.1.1', /"999\.1\.1\.1"/],
    [Array.from({ length: 9 }, (_, i) => `10.0.0.${i + 1}`).join(','), /at most 8/],
  ])('refuses %j naming the problem', (value, why) => {
    expect(() => parseDnsUpstreams(value)).toThrow(RangeError);
    expect(() => parseDnsUpstreams(value)).toThrow(why);
    expect(() => parseDnsUpstreams(value)).toThrow(/^BURROW_DNS_UPSTREAM: /);
  });
});

describe('hostDnsUpstreams', () => {
  it('takes every nameserver line in order and skips scoped IPv6 and comments', () => {
    const text =
      '# generated\nsearch example\nnameserver 10.255.255.53\n nameserver ::1\nnameserver fe80::1%eth0\n;nameserver 9.9.9.9\n';
    expect(hostDnsUpstreams(text)).toEqual([
      { address: '10.255.255.53', port: 53 },
      { address: '::1', port: 53 },
    ]);
  });

  it('refuses a resolv.conf without a nameserver, saying what to set', () => {
    expect(() => hostDnsUpstreams('search example\n')).toThrow(/BURROW_DNS_UPSTREAM/);
  });
});
