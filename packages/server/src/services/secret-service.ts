import { randomBytes } from 'node:crypto';
import {
  ErrorCode,
  MAX_SECRET_VALUE_BYTES,
  type NetworkRule,
  parseNetworkRule,
  ruleMatchesName,
  type SandboxSecretRequest,
  SECRET_PLACEHOLDER_PREFIX,
  type Secret,
  type SetSecretRequest,
} from '@burrow/contract';
import type { Logger } from 'pino';
import type { SecretCipher } from '../egress/secret-cipher.js';
import type { SandboxSecretBinding, SecretRow, SecretStore } from '../store/secret-store.js';
import { ApiError } from '../util/api-error.js';
import { type Clock, isoNow } from '../util/clock.js';
import type { Principal } from './key-service.js';

/** Where a sandbox with secrets finds the egress CA, and the env vars that point its clients at it. */
export const SANDBOX_CA_PATH = '/usr/local/share/ca-certificates/burrow-egress-ca.crt';
/** The system bundle the CA is appended to (OpenSSL's default file on Debian: curl, Python's ssl, git). */
export const SANDBOX_SYSTEM_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';
/** Env vars a sandbox with secrets gets so Node, requests, httpx and OpenSSL-based tools trust the egress CA. */
export const SANDBOX_TRUST_ENV: Readonly<Record<string, string>> = {
  NODE_EXTRA_CA_CERTS: SANDBOX_CA_PATH,
  SSL_CERT_FILE: SANDBOX_SYSTEM_BUNDLE,
  REQUESTS_CA_BUNDLE: SANDBOX_SYSTEM_BUNDLE,
};

/** A secret as the egress proxy applies it to one request. */
export interface EgressSecret {
  name: string;
  placeholder: string;
  value: string;
  header: string | null;
  format: string | null;
}

/** Dependencies of {@link SecretService}. */
export interface SecretServiceDeps {
  store: SecretStore;
  cipher: SecretCipher;
  clock: Clock;
  logger: Logger;
}

/** What a create with `secrets` adds to the sandbox. */
export interface SandboxSecretsPlan {
  /** Env vars: each placeholder, and with any secret the trust-store variables. */
  env: Record<string, string>;
  bindings: SandboxSecretBinding[];
}

function toSecret(row: SecretRow): Secret {
  return {
    name: row.name,
    hosts: row.hosts,
    header: row.header,
    format: row.format,
    createdAt: row.createdAt,
    rotatedAt: row.rotatedAt,
  };
}

function secretNotFound(name: string): ApiError {
  return new ApiError(ErrorCode.secretNotFound, `no secret ${name}`, {
    hint: 'list your secrets with `burrow secrets ls` (GET /v1/secrets)',
  });
}

function checkValue(value: string): void {
  const bytes = Buffer.byteLength(value, 'utf8');
  if (bytes > MAX_SECRET_VALUE_BYTES) {
    throw new ApiError(
      ErrorCode.secretTooLarge,
      `the secret value is ${bytes} bytes; at most ${MAX_SECRET_VALUE_BYTES} (64 KiB)`,
      { hint: 'store a shorter value (an API key or token, not a file)' },
    );
  }
}

function hostRules(hosts: readonly string[]): NetworkRule[] {
  return hosts.flatMap((host) => {
    const parsed = parseNetworkRule(host);
    return parsed.ok ? [parsed.rule] : [];
  });
}

/**
 * Secrets of a tenant, kept sealed, and the placeholders sandboxes hold of them. Values never leave this service
 * except to the egress proxy ({@link egressSecrets}); the API shows name, hosts, header, format and dates.
 */
export class SecretService {
  constructor(private readonly deps: SecretServiceDeps) {}

  async list(caller: Principal): Promise<Secret[]> {
    return (await this.deps.store.list(caller.tenantId)).map(toSecret);
  }

  /**
   * Create the secret or replace it whole (value, hosts, header, format).
   * @throws ApiError `secret_too_large` when the value is over 64 KiB
   */
  async set(caller: Principal, name: string, request: SetSecretRequest): Promise<Secret> {
    checkValue(request.value);
    const hosts = [...new Set(hostRules(request.hosts).map((rule) => rule.text))];
    const row = await this.deps.store.upsert(
      {
        tenantId: caller.tenantId,
        name,
        hosts,
        header: request.header ?? null,
        format: request.header === undefined ? null : (request.format ?? '{value}'),
        sealedValue: this.deps.cipher.seal(caller.tenantId, name, request.value),
      },
      isoNow(this.deps.clock),
    );
    this.deps.logger.info({ tenantId: caller.tenantId, secret: name, hosts }, 'secret set');
    return toSecret(row);
  }

  /**
   * Replace the value; the next request through the egress proxy carries the new one.
   * @throws ApiError `secret_not_found`, `secret_too_large`
   */
  async rotate(caller: Principal, name: string, value: string): Promise<Secret> {
    checkValue(value);
    const sealed = this.deps.cipher.seal(caller.tenantId, name, value);
    if (!(await this.deps.store.rotate(caller.tenantId, name, sealed, isoNow(this.deps.clock)))) {
      throw secretNotFound(name);
    }
    this.deps.logger.info({ tenantId: caller.tenantId, secret: name }, 'secret rotated');
    return toSecret((await this.deps.store.get(caller.tenantId, name)) as SecretRow);
  }

  /**
   * Delete the secret: sandboxes holding its placeholder send the placeholder from the next request on.
   * @throws ApiError `secret_not_found`
   */
  async remove(caller: Principal, name: string): Promise<void> {
    if (!(await this.deps.store.remove(caller.tenantId, name))) throw secretNotFound(name);
    this.deps.logger.info({ tenantId: caller.tenantId, secret: name }, 'secret deleted');
  }

  /**
   * The env vars and bindings of a create's `secrets`: a fresh placeholder per secret.
   * @throws ApiError `unknown_secret` naming every secret the tenant does not have
   */
  async plan(tenantId: string, requests: readonly SandboxSecretRequest[]): Promise<SandboxSecretsPlan> {
    if (requests.length === 0) return { env: {}, bindings: [] };
    const known = new Set((await this.deps.store.list(tenantId)).map((row) => row.name));
    const entries = requests.map((r) =>
      typeof r === 'string' ? { name: r, env: r } : { name: r.name, env: r.env ?? r.name },
    );
    const unknown = entries.filter((entry) => !known.has(entry.name)).map((entry) => entry.name);
    if (unknown.length > 0) {
      throw new ApiError(ErrorCode.unknownSecret, `no secret ${unknown.join(', ')} in this tenant`, {
        hint: 'set it first: `burrow secrets set NAME --host HOST` (PUT /v1/secrets/{name}); `burrow secrets ls` lists them',
        details: { names: unknown },
      });
    }
    const bindings = entries.map((entry) => ({
      ...entry,
      placeholder: `${SECRET_PLACEHOLDER_PREFIX}${randomBytes(16).toString('hex')}`,
    }));
    const env: Record<string, string> = { ...SANDBOX_TRUST_ENV };
    for (const binding of bindings) env[binding.env] = binding.placeholder;
    return { env, bindings };
  }

  /** Record a new sandbox's placeholders (after its row is written). */
  bind(tenantId: string, sandboxId: string, bindings: readonly SandboxSecretBinding[]): Promise<void> {
    return this.deps.store.bind(tenantId, sandboxId, bindings);
  }

  /** Give fork children the placeholders of their parent (their memory and env hold the same ones). */
  async copyBindings(parentId: string, childIds: readonly string[]): Promise<void> {
    const { tenantId, bindings } = await this.deps.store.bindings(parentId);
    if (tenantId === null) return;
    for (const childId of childIds) await this.deps.store.bind(tenantId, childId, bindings);
  }

  /** Whether `name` (normalized) is a host of any secret `sandboxId` holds: its connections go through the proxy. */
  async intercepts(sandboxId: string, name: string): Promise<boolean> {
    const { tenantId, bindings } = await this.deps.store.bindings(sandboxId);
    if (tenantId === null) return false;
    for (const binding of bindings) {
      const row = await this.deps.store.get(tenantId, binding.name);
      if (row !== null && hostRules(row.hosts).some((rule) => ruleMatchesName(rule, name))) return true;
    }
    return false;
  }

  /**
   * The secrets to apply to a request of `sandboxId` to `name`, values opened now (a rotation applies to the next
   * request). A secret deleted, or not bound to `name`, is left out: its placeholder goes out unchanged.
   */
  async egressSecrets(sandboxId: string, name: string): Promise<EgressSecret[]> {
    const { tenantId, bindings } = await this.deps.store.bindings(sandboxId);
    if (tenantId === null) return [];
    const secrets: EgressSecret[] = [];
    for (const binding of bindings) {
      const row = await this.deps.store.get(tenantId, binding.name);
      if (row === null || !hostRules(row.hosts).some((rule) => ruleMatchesName(rule, name))) continue;
      secrets.push({
        name: row.name,
        placeholder: binding.placeholder,
        value: this.deps.cipher.open(tenantId, row.name, row.sealedValue),
        header: row.header,
        format: row.format,
      });
    }
    return secrets;
  }
}
