import { describe, expect, it } from 'vitest';
import { networkConfigFrom } from './network-config.js';

const RESOLV_CONF =
  '# generated\nsearch example\nnameserver 192.0.2.53\nnameserver fe80::1%eth0\nnameserver 2001:db8::53\n';

describe('network config (pure)', () => {
  it('takes DNS upstreams from BURROW_DNS_UPSTREAM, without reading resolv.conf', () => {
    const config = networkConfigFrom({ BURROW_DNS_UPSTREAM: '198.18.0.2,198.18.0.3:5353' }, () => {
      throw new Error('resolv.conf must not be read');
    });
    expect(config?.dnsUpstreams).toEqual([
      { address: '198.18.0.2', port: 53 },
      { address: '198.18.0.3', port: 5353 },
    ]);
  });

  it("falls back to the host's resolv.conf, and to no upstream when it names none or cannot be read", () => {
    expect(networkConfigFrom({}, () => RESOLV_CONF)?.dnsUpstreams).toEqual([
      { address: '192.0.2.53', port: 53 },
      { address: '2001:db8::53', port: 53 },
    ]);
    expect(networkConfigFrom({}, () => 'search example\n')?.dnsUpstreams).toEqual([]);
    expect(
      networkConfigFrom({}, () => {
        throw new Error('ENOENT');
      })?.dnsUpstreams,
    ).toEqual([]);
  });

  it('refuses a malformed upstream naming it; no fixed resolver endpoint unless BURROW_NETWORK_RESOLVER sets one', () => {
    expect(() => networkConfigFrom({ BURROW_DNS_UPSTREAM: '198.18.0.2:99999' })).toThrow(/198\.18\.0\.2:99999/);
    expect(networkConfigFrom({})?.resolver).toBeNull();
    expect(networkConfigFrom({ BURROW_NETWORK_RESOLVER: '10.231.0.1:5400' })?.resolver).toEqual({
      address: '10.231.0.1',
      port: 5400,
    });
    expect(networkConfigFrom({ BURROW_NETWORK: 'off', BURROW_DNS_UPSTREAM: 'nonsense' })).toBeNull();
  });
});
