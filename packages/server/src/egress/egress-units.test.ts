import { mkdtempSync, rmSync, statSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { afterAll, describe, expect, it } from 'vitest';
import { SecretCipher } from './secret-cipher.js';
import { substituteSecrets } from './secret-substitution.js';
import { readClientHello } from './tls-client-hello.js';

const dir = mkdtempSync(join(tmpdir(), 'burrow-egress-units-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The first bytes a real Node TLS client sends for `servername` (undefined: no SNI). */
async function clientHello(servername: string | undefined): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const server = net.createServer((socket) => {
      socket.once('data', (chunk: Buffer) => {
        resolve(chunk);
        socket.destroy();
        server.close();
      });
    });
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      const client = tls.connect({ port, host: '127.0.0.1', ...(servername ? { servername } : {}) });
      client.on('error', () => {});
    });
    server.on('error', reject);
  });
}

describe('readClientHello', () => {
  it('reads the SNI name of a real ClientHello, none without SNI, and tells HTTP and short input apart', async () => {
    const hello = await clientHello('api.example.test');
    expect(readClientHello(hello)).toEqual({ kind: 'tls', serverName: 'api.example.test' });
    expect(readClientHello(hello.subarray(0, 40))).toEqual({ kind: 'incomplete' });
    // Node sends no SNI for an IP address.
    expect(readClientHello(await clientHello(undefined))).toEqual({ kind: 'tls', serverName: null });
    expect(readClientHello(Buffer.from('GET / HTTP/1.1\r\n'))).toEqual({ kind: 'not-tls' });
    expect(readClientHello(Buffer.alloc(0))).toEqual({ kind: 'incomplete' });
  });
});

describe('substituteSecrets', () => {
  const ph = 'burrow-secret-0123456789abcdef0123456789abcdef';
  it('replaces placeholders in the target and header values, and sets a bound header whatever was sent', () => {
    const out = substituteSecrets(
      `/v1?key=${ph}`,
      ['Host', 'api.test', 'X-Key', `k=${ph}`, 'authorization', 'Bearer old', 'Connection', 'keep-alive'],
      [
        { placeholder: ph, value: 'REAL1', header: null, format: null },
        { placeholder: 'burrow-secret-x', value: 'REAL2', header: 'Authorization', format: 'Bearer {value}' },
      ],
    );
    expect(out.target).toBe('/v1?key=REAL1');
    expect(out.headers).toEqual([
      ['Host', 'api.test'],
      ['X-Key', 'k=REAL1'],
      ['Authorization', 'Bearer REAL2'],
    ]);
  });
  it('leaves the request as sent without secrets (a host no secret is bound to)', () => {
    const out = substituteSecrets(`/a?${ph}`, ['X-Key', ph], []);
    expect(out).toEqual({ target: `/a?${ph}`, headers: [['X-Key', ph]] });
  });
});

describe('SecretCipher', () => {
  it('makes a 0600 key, opens what it sealed, and refuses another tenant, name or an altered value', async () => {
    const keyFile = join(dir, 'secret-key');
    const cipher = await SecretCipher.load(keyFile);
    expect(statSync(keyFile).mode & 0o777).toBe(0o600);
    const sealed = cipher.seal('t1', 'API', 'sk-value');
    expect(sealed).not.toContain('sk-value');
    expect((await SecretCipher.load(keyFile)).open('t1', 'API', sealed)).toBe('sk-value');
    expect(() => cipher.open('t2', 'API', sealed)).toThrow();
    expect(() => cipher.open('t1', 'OTHER', sealed)).toThrow();
    const altered = `${sealed.slice(0, -4)}AAAA`;
    expect(() => cipher.open('t1', 'API', altered)).toThrow();
  });
});
