import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { runCommand } from '../run-command.js';

/** A throwaway certificate authority and one server certificate it signed, as PEM files in a directory. */
export interface TestCertificates {
  /** The CA certificate (PEM): what a client trusts (`curl --cacert`, `pip --cert`, `git -c http.sslCAInfo`). */
  caCertPath: string;
  caCertPem: string;
  /** The server's certificate and key (PEM). */
  serverCertPath: string;
  serverKeyPath: string;
}

/**
 * Make a CA and a server certificate for `names` (DNS names, `*.test` allowed) and `addresses` (IPv4), valid for
 * 2 days, with openssl. For test servers only: the keys are unencrypted files in `dir`.
 * @returns the files written
 * @throws Error when openssl fails
 */
export async function makeTestCertificates(options: {
  dir: string;
  names: readonly string[];
  addresses: readonly string[];
}): Promise<TestCertificates> {
  const path = (name: string) => join(options.dir, name);
  const openssl = async (args: string[]): Promise<void> => {
    const result = await runCommand('openssl', args);
    if (result.exitCode !== 0) throw new Error(`openssl ${args[0]} failed: ${result.stderr.trim()}`);
  };
  await openssl([
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-days',
    '2',
    '-subj',
    '/CN=Burrow test internet CA',
    '-keyout',
    path('ca.key'),
    '-out',
    path('ca.pem'),
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
  ]);
  await openssl([
    'req',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-subj',
    '/CN=burrow test internet',
    '-keyout',
    path('server.key'),
    '-out',
    path('server.csr'),
  ]);
  const san = [...options.names.map((name) => `DNS:${name}`), ...options.addresses.map((ip) => `IP:${ip}`)].join(',');
  await writeFile(
    path('server.ext'),
    `subjectAltName=${san}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n`,
  );
  await openssl([
    'x509',
    '-req',
    '-in',
    path('server.csr'),
    '-CA',
    path('ca.pem'),
    '-CAkey',
    path('ca.key'),
    '-CAcreateserial',
    '-days',
    '2',
    '-extfile',
    path('server.ext'),
    '-out',
    path('server.pem'),
  ]);
  return {
    caCertPath: path('ca.pem'),
    caCertPem: await readFile(path('ca.pem'), 'utf8'),
    serverCertPath: path('server.pem'),
    serverKeyPath: path('server.key'),
  };
}
