import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdir, readFile, rename, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import forge from 'node-forge';

/** A certificate and its private key, PEM. */
export interface PemPair {
  certPem: string;
  keyPem: string;
}

/** Leaves stay valid this long; they are minted again a day before. */
const LEAF_VALIDITY_MS = 7 * 24 * 3600_000;
const CA_VALIDITY_YEARS = 10;
const CA_DIR = 'egress-ca';

/**
 * The installation's egress CA, loaded (and minted, the first time) on first use: a server whose sandboxes hold no
 * secrets never pays for the RSA keys.
 */
export class LazyEgressCa {
  private loaded: Promise<EgressCa> | undefined;

  constructor(private readonly dataDir: string) {}

  /**
   * The CA, loaded or minted once.
   * @throws Error as {@link EgressCa.load}
   */
  get(): Promise<EgressCa> {
    this.loaded ??= EgressCa.load(this.dataDir).catch((error: unknown) => {
      this.loaded = undefined;
      throw error;
    });
    return this.loaded;
  }
}

/**
 * The installation's egress CA: minted once into `<data-dir>/egress-ca/` (`ca.pem`, and `ca.key` with mode 0600),
 * installed into the trust stores of sandboxes with secrets, and signing a leaf per host name the egress proxy
 * terminates TLS for. Leaves share one RSA key made at load and are cached per name.
 */
export class EgressCa {
  private readonly leaves = new Map<string, { pair: PemPair; renewAtMs: number }>();
  private readonly leafKey: { publicKey: forge.pki.rsa.PublicKey; privateKey: forge.pki.rsa.PrivateKey; pem: string };

  private constructor(
    /** The CA certificate, PEM: what sandboxes trust. */
    readonly certPem: string,
    private readonly caCert: forge.pki.Certificate,
    private readonly caKey: forge.pki.rsa.PrivateKey,
  ) {
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const forgeKey = forge.pki.privateKeyFromPem(pem) as forge.pki.rsa.PrivateKey;
    this.leafKey = { privateKey: forgeKey, publicKey: forge.pki.setRsaPublicKey(forgeKey.n, forgeKey.e), pem };
  }

  /**
   * Load the CA from `dataDir`, minting it on first use.
   * @throws Error when `ca.key` is readable by group or others, or the files do not parse
   */
  static async load(dataDir: string): Promise<EgressCa> {
    const dir = join(dataDir, CA_DIR);
    const certPath = join(dir, 'ca.pem');
    const keyPath = join(dir, 'ca.key');
    if ((await stat(certPath).catch(() => null)) === null) {
      await mkdir(dir, { recursive: true, mode: 0o700 });
      const minted = mintCa();
      // The key first, then the certificate by rename: a crash leaves no certificate without its key.
      await writeFile(keyPath, minted.keyPem, { mode: 0o600 });
      await writeFile(`${certPath}.tmp`, minted.certPem);
      await rename(`${certPath}.tmp`, certPath);
    }
    const keyStat = await stat(keyPath);
    if ((keyStat.mode & 0o077) !== 0)
      throw new Error(`the egress CA key ${keyPath} is readable by others; chmod 600 it`);
    const certPem = await readFile(certPath, 'utf8');
    const keyPem = await readFile(keyPath, 'utf8');
    return new EgressCa(
      certPem,
      forge.pki.certificateFromPem(certPem),
      forge.pki.privateKeyFromPem(keyPem) as forge.pki.rsa.PrivateKey,
    );
  }

  /** A leaf certificate for `name` (a DNS name), signed by the CA; cached until a day before it expires. */
  leafFor(name: string, nowMs = Date.now()): PemPair {
    const cached = this.leaves.get(name);
    if (cached !== undefined && cached.renewAtMs > nowMs) return cached.pair;
    const cert = forge.pki.createCertificate();
    cert.publicKey = this.leafKey.publicKey;
    cert.serialNumber = serial();
    cert.validity.notBefore = new Date(nowMs - 3600_000);
    cert.validity.notAfter = new Date(nowMs + LEAF_VALIDITY_MS);
    cert.setSubject([{ name: 'commonName', value: name }]);
    cert.setIssuer(this.caCert.subject.attributes);
    cert.setExtensions([
      { name: 'basicConstraints', cA: false },
      { name: 'keyUsage', critical: true, digitalSignature: true, keyEncipherment: true },
      { name: 'extKeyUsage', serverAuth: true },
      { name: 'subjectAltName', altNames: [{ type: 2, value: name }] },
    ]);
    cert.sign(this.caKey, forge.md.sha256.create());
    const pair = { certPem: forge.pki.certificateToPem(cert), keyPem: this.leafKey.pem };
    if (this.leaves.size > 10_000) this.leaves.clear();
    this.leaves.set(name, { pair, renewAtMs: nowMs + LEAF_VALIDITY_MS - 24 * 3600_000 });
    return pair;
  }
}

/** A positive serial of 16 random bytes, hex (a leading 0 keeps DER's integer positive). */
function serial(): string {
  return `0${randomBytes(16).toString('hex')}`;
}

function mintCa(): PemPair {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const keyPem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const key = forge.pki.privateKeyFromPem(keyPem) as forge.pki.rsa.PrivateKey;
  const cert = forge.pki.createCertificate();
  cert.publicKey = forge.pki.setRsaPublicKey(key.n, key.e);
  cert.serialNumber = serial();
  const now = new Date();
  cert.validity.notBefore = new Date(now.getTime() - 3600_000);
  cert.validity.notAfter = new Date(now.getTime());
  cert.validity.notAfter.setFullYear(now.getFullYear() + CA_VALIDITY_YEARS);
  const subject = [
    { name: 'commonName', value: `Burrow egress CA ${randomBytes(4).toString('hex')}` },
    { name: 'organizationName', value: 'Burrow' },
  ];
  cert.setSubject(subject);
  cert.setIssuer(subject);
  cert.setExtensions([
    { name: 'basicConstraints', cA: true, pathLenConstraint: 0, critical: true },
    { name: 'keyUsage', critical: true, keyCertSign: true, cRLSign: true },
    { name: 'subjectKeyIdentifier' },
  ]);
  cert.sign(key, forge.md.sha256.create());
  return { certPem: forge.pki.certificateToPem(cert), keyPem };
}
