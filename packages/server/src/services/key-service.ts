import { createHash, randomBytes } from 'node:crypto';
import type { ApiKey, ApiKeyRole, KeyRestriction, KeyScope } from '@burrow/contract';
import { ErrorCode } from '@burrow/contract';
import type { Logger } from 'pino';
import type { ApiKeyRecord, KeyStore } from '../store/key-store.js';
import { ApiError } from '../util/api-error.js';
import { type Clock, isoNow } from '../util/clock.js';
import { newId, randomBase32 } from '../util/ids.js';
import { effectiveRole, effectiveScopes, ROLE_SCOPES } from './key-scopes.js';

/** Who is calling: the authenticated key's tenant, role and what it may reach. */
export interface Principal {
  keyId: string;
  tenantId: string;
  /** The role the key acts with (an admin key without the `admin` scope acts as a member). */
  role: ApiKeyRole;
  /** The key's name, for the audit log. */
  keyName?: string;
  /** Scopes the key holds. Absent: every scope of its role (internal callers). */
  scopes?: readonly KeyScope[];
  /** Sandboxes the key reaches. Absent or null: the whole tenant. */
  restriction?: KeyRestriction | null;
  /** When the key stops working, ms since the epoch; absent or null: never. */
  expiresAtMs?: number | null;
}

/** Options of {@link KeyService.create}. */
export interface CreateKeyRequest {
  name: string;
  tenantId?: string | undefined;
  role: ApiKeyRole;
  /** Secret format. @default 'bk' */
  format?: 'bk' | 'e2b' | undefined;
  /** @default every scope of the role */
  scopes?: KeyScope[] | undefined;
  /** @default the whole tenant */
  restriction?: KeyRestriction | undefined;
  /** Lifetime from now, ms; exclusive with `expiresAt`. @default no expiry */
  ttlMs?: number | undefined;
  /** ISO-8601 instant in the future. @default no expiry */
  expiresAt?: string | undefined;
}

/** Tenant of the first admin key. */
export const DEFAULT_TENANT = 'default';
/** Characters of the secret kept in the clear as the key's `prefix`. */
const PREFIX_LENGTH = 8;

/** sha256 of a secret, hex: the only form in which secrets are stored. */
export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret, 'utf8').digest('hex');
}

/** A new secret: `bk_` + 32 random base32 characters, or with `e2b`, `e2b_` + 40 hex characters (160 bits each). */
export function newSecret(format: 'bk' | 'e2b' = 'bk'): string {
  return format === 'e2b' ? `e2b_${randomBytes(20).toString('hex')}` : `bk_${randomBase32(32)}`;
}

function toApiKey(r: ApiKeyRecord): ApiKey {
  return {
    id: r.id,
    name: r.name,
    tenantId: r.tenantId,
    role: r.role,
    scopes: r.scopes,
    restriction: r.restriction,
    prefix: r.prefix,
    createdAt: r.createdAt,
    expiresAt: r.expiresAt,
    revokedAt: r.revokedAt,
    lastUsedAt: r.lastUsedAt,
  };
}

function principalOfRecord(r: ApiKeyRecord): Principal {
  const scopes = effectiveScopes(r.role, r.scopes);
  return {
    keyId: r.id,
    tenantId: r.tenantId,
    role: effectiveRole(r.role, scopes),
    keyName: r.name,
    scopes,
    restriction: r.restriction,
    expiresAtMs: r.expiresAt === null ? null : Date.parse(r.expiresAt),
  };
}

function forbidden(what: string): ApiError {
  return new ApiError(ErrorCode.forbidden, `${what} needs an admin key`, {
    hint: 'use the admin key (written to <dataDir>/admin-key by `burrow setup`)',
  });
}

function refused(message: string, hint: string): ApiError {
  return new ApiError(ErrorCode.forbidden, message, { hint });
}

/**
 * How long a successful authentication is reused without reading the key again, in ms: the bound on how long a key
 * revoked through another server sharing the database still works (a revoke through this server takes effect at
 * once).
 */
export const AUTH_CACHE_TTL_MS = 1000;
/** Secrets whose authentication is kept at most (the oldest is dropped first). */
const AUTH_CACHE_MAX_ENTRIES = 1024;

/** API keys: authentication, listing, creation and revocation. */
export class KeyService {
  /** Recent successful authentications by secret (never failed ones: an unknown secret is read every time). */
  private readonly authenticated = new Map<string, { principal: Principal; untilMs: number }>();
  /** Revocations through this service so far: a read that overlapped one is not kept. */
  private revocations = 0;

  /** Last `last_used_at` write per key id, ms: at most one a second per key and server. */
  private readonly touchedAtMs = new Map<string, number>();

  /**
   * @param deps.sandboxExists whether tenant `tenantId` has sandbox `id` (checks a `sandbox` restriction at create;
   *   absent: not checked)
   */
  constructor(
    private readonly deps: {
      keys: KeyStore;
      clock: Clock;
      logger: Logger;
      sandboxExists?: (tenantId: string, id: string) => Promise<boolean>;
    },
  ) {}

  /**
   * The principal whose secret is `secret`. A success is reused for {@link AUTH_CACHE_TTL_MS} (hashing the secret
   * and reading its key took 0.6–1.7 ms p50 of every request on a loaded 2-core host), never past the key's expiry.
   * @throws ApiError `unauthorized` for an unknown or revoked secret, `key_expired` past the key's `expiresAt`
   */
  async authenticate(secret: string): Promise<Principal> {
    const nowMs = this.deps.clock.nowMs();
    const cached = this.authenticated.get(secret);
    if (cached !== undefined && cached.untilMs > nowMs) return cached.principal;
    this.authenticated.delete(secret);
    const revocations = this.revocations;
    const record = await this.deps.keys.findBySecretHash(hashSecret(secret));
    if (record === null || record.revokedAt !== null) {
      throw new ApiError(ErrorCode.unauthorized, record === null ? 'unknown API key' : 'this API key is revoked', {
        hint: 'pass a valid key as `Authorization: Bearer bk_…` (BURROW_API_KEY for the SDK and CLI)',
      });
    }
    const principal = principalOfRecord(record);
    const expiresAtMs = principal.expiresAtMs ?? null;
    if (expiresAtMs !== null && expiresAtMs <= nowMs) {
      throw new ApiError(ErrorCode.keyExpired, `this API key expired at ${record.expiresAt}`, {
        hint: 'ask whoever issued it for a new key (`burrow keys create … --ttl`)',
      });
    }
    this.noteUse(record.id, nowMs);
    if (revocations !== this.revocations) return principal;
    const untilMs = Math.min(nowMs + AUTH_CACHE_TTL_MS, expiresAtMs ?? Number.POSITIVE_INFINITY);
    this.authenticated.set(secret, { principal, untilMs });
    if (this.authenticated.size > AUTH_CACHE_MAX_ENTRIES) {
      this.authenticated.delete(this.authenticated.keys().next().value as string);
    }
    return principal;
  }

  /** Keys the caller may see: every key for an admin, its own tenant's for a member. */
  async list(caller: Principal): Promise<ApiKey[]> {
    const rows = await this.deps.keys.list(caller.role === 'admin' ? null : caller.tenantId);
    return rows.map(toApiKey);
  }

  /**
   * Create a key. An admin key creates any key; a member key creates member or viewer keys of its own tenant that
   * hold no scope it lacks and expire no later than it does (an agent's key handed on by its owner).
   * @returns the key and its secret (shown once)
   * @throws ApiError `forbidden` when the caller may not create this key, `invalid_request` for a scope the role
   *   cannot hold or an expiry not in the future, `sandbox_not_found` for a restriction naming a sandbox the tenant
   *   does not have
   */
  async create(caller: Principal, request: CreateKeyRequest): Promise<{ key: ApiKey; secret: string }> {
    const tenantId = request.tenantId ?? caller.tenantId;
    const nowMs = this.deps.clock.nowMs();
    const callerScopes = caller.scopes ?? ROLE_SCOPES[caller.role];
    if (caller.role !== 'admin') {
      if (caller.role === 'viewer') throw forbidden('creating keys');
      if (tenantId !== caller.tenantId) throw forbidden('creating a key for another tenant');
      if (request.role === 'admin') throw forbidden('creating an admin key');
      if ((caller.restriction ?? null) !== null) {
        throw refused('a key restricted to some sandboxes cannot create keys', 'create keys with an unrestricted key');
      }
    }
    const allowed = ROLE_SCOPES[request.role];
    const wrongForRole = (request.scopes ?? []).filter((s) => !allowed.includes(s));
    if (wrongForRole.length > 0) {
      throw new ApiError(ErrorCode.invalidRequest, `a ${request.role} key cannot hold ${wrongForRole.join(', ')}`, {
        hint: 'the admin scope needs role admin',
        details: { scopes: wrongForRole },
      });
    }
    const lacking = (request.scopes ?? allowed).filter((s) => !callerScopes.includes(s));
    if (caller.role !== 'admin' && lacking.length > 0) {
      throw refused(
        `this key cannot grant scopes it lacks: ${lacking.join(', ')}`,
        'pass --scope with scopes you hold',
      );
    }
    const expiresAtMs =
      request.ttlMs !== undefined
        ? nowMs + request.ttlMs
        : request.expiresAt !== undefined
          ? Date.parse(request.expiresAt)
          : null;
    if (expiresAtMs !== null && expiresAtMs <= nowMs) {
      throw new ApiError(ErrorCode.invalidRequest, `expiresAt ${request.expiresAt} is not in the future`, {
        hint: 'pass a later expiresAt, or ttlMs for a lifetime from now',
      });
    }
    const callerExpiresAtMs = caller.expiresAtMs ?? null;
    if (
      caller.role !== 'admin' &&
      callerExpiresAtMs !== null &&
      (expiresAtMs === null || expiresAtMs > callerExpiresAtMs)
    ) {
      throw refused(
        `this key expires at ${new Date(callerExpiresAtMs).toISOString()} and cannot create a key that outlives it`,
        'pass a shorter ttlMs',
      );
    }
    const restriction = request.restriction ?? null;
    if (restriction?.type === 'sandbox' && this.deps.sandboxExists !== undefined) {
      if (!(await this.deps.sandboxExists(tenantId, restriction.sandboxId))) {
        throw new ApiError(ErrorCode.sandboxNotFound, `tenant ${tenantId} has no sandbox ${restriction.sandboxId}`, {
          hint: 'restrict the key to a sandbox of the tenant it acts for (burrow ls)',
        });
      }
    }
    return this.mint({
      name: request.name,
      tenantId,
      role: request.role,
      format: request.format ?? 'bk',
      scopes: request.scopes ?? null,
      restriction,
      expiresAt: expiresAtMs === null ? null : new Date(expiresAtMs).toISOString(),
      // One reading of the clock: a ttlMs key expires exactly ttlMs after its createdAt.
      createdAt: new Date(nowMs).toISOString(),
    });
  }

  /**
   * Revoke key `id`: an admin key any key, a member key the member and viewer keys of its own tenant. Revoking a
   * revoked key succeeds.
   * @throws ApiError `forbidden` when the caller may not, `key_not_found` for an unknown id (or another tenant's,
   *   for a member)
   */
  async revoke(caller: Principal, id: string): Promise<void> {
    if (caller.role === 'viewer') throw forbidden('revoking keys');
    const record = await this.deps.keys.get(caller.role === 'admin' ? null : caller.tenantId, id);
    if (record === null) {
      throw new ApiError(ErrorCode.keyNotFound, `no API key ${id}`, { hint: 'list keys with GET /v1/keys' });
    }
    if (caller.role !== 'admin' && record.role === 'admin') throw forbidden('revoking an admin key');
    await this.deps.keys.revoke(id, isoNow(this.deps.clock));
    this.revocations++;
    for (const [secret, entry] of this.authenticated) {
      if (entry.principal.keyId === id) this.authenticated.delete(secret);
    }
    this.deps.logger.info({ keyId: id, by: caller.keyId }, 'api key revoked');
  }

  /**
   * Create the first admin key when no admin key exists yet.
   * @returns the new secret, or null when an admin key already exists
   */
  async ensureAdminKey(): Promise<string | null> {
    if (await this.deps.keys.hasAdminKey()) return null;
    const { secret } = await this.mint({ name: 'admin', tenantId: DEFAULT_TENANT, role: 'admin' });
    return secret;
  }

  /** Write `last_used_at` for key `id` unless this server did within the last second (failures only logged). */
  private noteUse(id: string, nowMs: number): void {
    const last = this.touchedAtMs.get(id);
    if (last !== undefined && nowMs - last < AUTH_CACHE_TTL_MS) return;
    this.touchedAtMs.set(id, nowMs);
    if (this.touchedAtMs.size > AUTH_CACHE_MAX_ENTRIES) {
      this.touchedAtMs.delete(this.touchedAtMs.keys().next().value as string);
    }
    this.deps.keys
      .touch(id, new Date(Math.floor(nowMs / 1000) * 1000).toISOString())
      .catch((err: unknown) => this.deps.logger.warn({ err, keyId: id }, 'could not record key use'));
  }

  private async mint(request: {
    name: string;
    tenantId: string;
    role: ApiKeyRole;
    format?: 'bk' | 'e2b';
    scopes?: KeyScope[] | null;
    restriction?: KeyRestriction | null;
    expiresAt?: string | null;
    createdAt?: string;
  }) {
    const secret = newSecret(request.format);
    const record: ApiKeyRecord = {
      id: newId('key'),
      tenantId: request.tenantId,
      name: request.name,
      role: request.role,
      prefix: secret.slice(0, PREFIX_LENGTH),
      secretHash: hashSecret(secret),
      createdAt: request.createdAt ?? isoNow(this.deps.clock),
      revokedAt: null,
      scopes: request.scopes ?? null,
      restriction: request.restriction ?? null,
      expiresAt: request.expiresAt ?? null,
      lastUsedAt: null,
    };
    await this.deps.keys.insert(record);
    this.deps.logger.info(
      { keyId: record.id, tenantId: record.tenantId, role: record.role, scopes: record.scopes },
      'api key created',
    );
    return { key: toApiKey(record), secret };
  }
}
