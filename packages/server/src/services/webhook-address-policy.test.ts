/**
 * Webhook SSRF policy: internal addresses (loopback, private, link-local, reserved; IPv4-mapped IPv6 too) are
 * refused at registration and at each delivery, after DNS resolution (a name that resolves to an internal address
 * is refused like the address), unless the operator allows internal targets. Real sockets on 127.0.0.1.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { ApiError } from '../util/api-error.js';
import { checkWebhookUrl, InternalAddressError, isInternalAddress, postWebhook } from './webhook-address-policy.js';

describe('isInternalAddress', () => {
  test.each([
    '127.0.0.1',
    '127.9.9.9',
    '10.1.2.3',
    '172.16.0.1',
    '172.31.255.255',
    '192.168.1.1',
    '169.254.169.254',
    '100.64.0.1',
    '0.0.0.0',
    '224.0.0.1',
    '255.255.255.255',
    '::1',
    '::',
    'fe80::1',
    'fd00::1',
    'ff02::1',
    '::ffff:127.0.0.1',
    '::ffff:7f00:1',
    '[::1]',
    'localhost',
  ])('%s is internal', (address) => {
    expect(isInternalAddress(address)).toBe(true);
  });
  test.each(['8.8.8.8', '203.0.113.9', '172.32.0.1', '1.1.1.1', '2606:4700::1111', '::ffff:8.8.8.8'])(
    '%s is not internal',
    (address) => {
      expect(isInternalAddress(address)).toBe(false);
    },
  );
});

describe('registration and delivery', () => {
  let server: Server;
  let port = 0;
  let received = 0;
  beforeAll(async () => {
    server = createServer((req, res) => {
      received += 1;
      req.resume();
      res.writeHead(204).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
  });

  test('registration refuses internal IP literals and names that resolve to them, with webhook_url_forbidden', async () => {
    for (const url of [
      'http://127.0.0.1:9/x',
      'http://[::1]:9/x',
      'https://169.254.169.254/latest',
      'http://localhost:9/',
    ]) {
      const error = await checkWebhookUrl(url).then(
        () => null,
        (e: unknown) => e,
      );
      expect(error, url).toBeInstanceOf(ApiError);
      expect((error as ApiError).code, url).toBe('webhook_url_forbidden');
    }
    await expect(checkWebhookUrl('http://203.0.113.9:9/hook')).resolves.toBeUndefined();
  });

  test('delivery re-checks after DNS: nothing reaches an internal receiver unless allowed', async () => {
    const send = (host: string, allowInternal: boolean) =>
      postWebhook(`http://${host}:${port}/hook`, { 'content-type': 'application/json' }, '{}', {
        allowInternal,
        timeoutMs: 10_000,
      });
    // An IP literal, and a name whose DNS answer is internal (what a rebinding attack registers as public).
    await expect(send('127.0.0.1', false)).rejects.toBeInstanceOf(InternalAddressError);
    await expect(send('localhost', false)).rejects.toBeInstanceOf(InternalAddressError);
    expect(received).toBe(0);
    await expect(send('127.0.0.1', true)).resolves.toBe(204);
    expect(received).toBe(1);
  });
});
