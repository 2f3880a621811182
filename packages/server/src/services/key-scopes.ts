import { type ApiKeyRole, KEY_SCOPES, type KeyRestriction, type KeyScope } from '@burrow/contract';

/** Scopes each role may hold: an admin every one, a member or viewer every one but `admin`. */
export const ROLE_SCOPES: { readonly [R in ApiKeyRole]: readonly KeyScope[] } = {
  admin: KEY_SCOPES,
  member: KEY_SCOPES.filter((s) => s !== 'admin'),
  viewer: KEY_SCOPES.filter((s) => s !== 'admin'),
};

/**
 * The scopes a key holds: its own list (null: every scope of its role), never more than its role allows.
 */
export function effectiveScopes(role: ApiKeyRole, scopes: readonly KeyScope[] | null): readonly KeyScope[] {
  const allowed = ROLE_SCOPES[role];
  return scopes === null ? allowed : scopes.filter((s) => allowed.includes(s));
}

/**
 * The role a key acts with: an admin key without the `admin` scope acts as a member (services check the role, so
 * taking the scope away must take the role's powers away too).
 */
export function effectiveRole(role: ApiKeyRole, scopes: readonly KeyScope[]): ApiKeyRole {
  return role === 'admin' && !scopes.includes('admin') ? 'member' : role;
}

/** Whether `principal` holds every member scope over its whole tenant (what a route without a scope check needs). */
export function hasFullRights(principal: {
  role: ApiKeyRole;
  scopes?: readonly KeyScope[];
  restriction?: KeyRestriction | null;
}): boolean {
  if (principal.role === 'viewer' || (principal.restriction ?? null) !== null) return false;
  const scopes = principal.scopes ?? ROLE_SCOPES[principal.role];
  return ROLE_SCOPES.member.every((s) => scopes.includes(s));
}
