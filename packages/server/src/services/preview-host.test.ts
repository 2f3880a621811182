import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { cleanResponseHeaders } from '../http/preview-proxy.js';
import { listeningSockets } from './port-service.js';
import { PreviewAccess } from './preview-access.js';
import { PreviewHosts, previewLabel } from './preview-host.js';

const ID = 'sbx_0123456789abcdefghjk';

describe('preview hosts', () => {
  const hosts = new PreviewHosts('localhost');

  test('a label maps back to its sandbox and port, whatever the case, port or trailing dot', () => {
    expect(previewLabel(ID, 8000)).toBe('8000-sbx-0123456789abcdefghjk');
    for (const host of [
      '8000-sbx-0123456789abcdefghjk.localhost:7420',
      '8000-SBX-0123456789ABCDEFGHJK.LOCALHOST',
      '8000-sbx-0123456789abcdefghjk.localhost.:80',
    ]) {
      expect(hosts.parse(host)).toEqual({ kind: 'port', sandboxId: ID, port: 8000 });
    }
    expect(hosts.url(ID, 8000, 7420)).toBe('http://8000-sbx-0123456789abcdefghjk.localhost:7420/');
  });

  test('other hosts are not preview hosts; bad ports are named', () => {
    for (const host of [
      undefined,
      'localhost:7420',
      '127.0.0.1:7420',
      '8000-sbx-0123456789abcdefghjk.example.com',
      '8000-sbx-0123456789abcdefghj.localhost',
      '8000-sbx-0123456789abcdefghju.localhost',
      'x.8000-sbx-0123456789abcdefghjk.localhost',
      '8000-sbx_0123456789abcdefghjk.localhost',
    ]) {
      expect(hosts.parse(host)).toBeNull();
    }
    for (const text of ['0', '65536', '080']) {
      expect(hosts.parse(`${text}-sbx-0123456789abcdefghjk.localhost`)).toEqual({
        kind: 'bad_port',
        sandboxId: ID,
        text,
      });
    }
  });
});

describe('preview access', () => {
  test('tokens and signatures bind sandbox, port and expiry; the secret file is 0600 and kept', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'burrow-preview-secret-'));
    try {
      const access = await PreviewAccess.load(join(dir, 'preview-secret'));
      expect((await stat(join(dir, 'preview-secret'))).mode & 0o777).toBe(0o600);
      const again = await PreviewAccess.load(join(dir, 'preview-secret'));
      expect(again.accessToken(ID)).toBe(access.accessToken(ID));
      expect(access.checkToken(ID, access.accessToken(ID))).toBe(true);
      expect(access.checkToken(ID, access.accessToken('sbx_00000000000000000000'))).toBe(false);
      const signed = access.sign(ID, 8000, 2_000);
      expect(access.verifySignature(ID, 8000, signed, 1_000)).toBe('ok');
      expect(access.verifySignature(ID, 8000, signed, 2_000)).toBe('expired');
      expect(access.verifySignature(ID, 8001, signed, 1_000)).toBe('invalid');
      expect(access.verifySignature(ID, 8000, signed.replace(/^2000/, '9000'), 1_000)).toBe('invalid');
      expect(access.verifySignature(ID, 8000, 'garbage', 1_000)).toBe('invalid');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('listening sockets from /proc/net/tcp', () => {
  test('LISTEN sockets only, by port, a wildcard address over a loopback one', () => {
    const text = [
      '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode',
      '   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1',
      '   1: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2',
      '   2: 0100007F:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3',
      '   3: 0200A8C0:1F40 0100A8C0:D431 01 00000000:00000000 00:00000000 00000000     0        0 4',
      '   0: 00000000000000000000000000000000:1F41 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 5',
    ].join('\n');
    expect(listeningSockets(text)).toEqual([
      { port: 22, address: '127.0.0.1' },
      { port: 8000, address: '0.0.0.0' },
      { port: 8001, address: '::' },
    ]);
  });
});

describe('response headers from a sandbox', () => {
  test('X-Burrow-* and X-Request-Id go, burrow_* cookies go, Domain attributes go', () => {
    const headers: Record<string, string | string[] | undefined> = {
      'x-burrow-sandbox': 'forged',
      'x-request-id': 'forged',
      'content-type': 'text/plain',
      'set-cookie': ['a=1; Domain=localhost; Path=/', 'burrow_preview=x', 'b=2;domain=.localhost;HttpOnly'],
    };
    cleanResponseHeaders(headers);
    expect(headers).toEqual({ 'content-type': 'text/plain', 'set-cookie': ['a=1; Path=/', 'b=2;HttpOnly'] });
  });
});
