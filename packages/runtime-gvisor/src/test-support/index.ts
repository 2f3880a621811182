/**
 * Test support for network tests: a test "internet" in its own network namespace, its authoritative DNS server,
 * a DNS test client and a hand-made wheel. Not part of Burrow's runtime; tests of every package import it from
 * `@burrow/runtime-gvisor/test-support`.
 */
export {
  type AuthoritativeDns,
  type AuthoritativeDnsOptions,
  type DnsQueryRecord,
  startAuthoritativeDns,
} from './authoritative-dns.js';
export { type DnsAnswer, type QueryDnsOptions, queryDns } from './dns-client.js';
export { makeTestCertificates, type TestCertificates } from './test-certificates.js';
export {
  startTestInternet,
  sweepTestInternets,
  TEST_INTERNET_PREFIX,
  type TestHttpRequest,
  type TestInternet,
  type TestInternetOptions,
} from './test-internet.js';
export { type BuildTestWheelOptions, buildTestWheel, type TestWheel } from './test-wheel.js';
