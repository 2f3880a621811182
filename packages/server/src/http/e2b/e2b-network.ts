import {
  type E2bNetwork,
  type E2bNetworkUpdate,
  type NetworkPolicyRequestParsed,
  NetworkPolicyRequestSchema,
  type SandboxNetwork,
} from '@burrow/contract';
import { E2bError } from './e2b-errors.js';

/** Every IPv4 address: E2B's `ALL_TRAFFIC`, what `allow_internet_access: false` denies. */
export const E2B_ALL_TRAFFIC = '0.0.0.0/0';

/**
 * Burrow's network policy for E2B's create options, or `undefined` when they ask for nothing (the server's default).
 * `allow_internet_access: false` is `denyOut: ['0.0.0.0/0']`, which E2B defines it to be: `allowOut` still wins, so
 * it turns `allowOut` into an allowlist, and a later update that leaves it out opens the sandbox again (mode `none`
 * would do neither). `allowPublicTraffic: true` and an empty `maskRequestHost` are the defaults and pass.
 * @throws E2bError 400 naming the option Burrow cannot honour, or the malformed entry
 */
export function networkFromE2bCreate(
  allowInternetAccess: boolean | null | undefined,
  network: E2bNetwork | null | undefined,
): NetworkPolicyRequestParsed | undefined {
  if (network !== null && network !== undefined) {
    if (network.allowPublicTraffic === false) {
      refuse(
        'network.allowPublicTraffic: false',
        'Burrow serves no public sandbox URLs (no ingress), so there is none to protect; leave it out',
      );
    }
    if (network.maskRequestHost !== undefined && network.maskRequestHost !== null && network.maskRequestHost !== '') {
      refuse('network.maskRequestHost', 'Burrow has no ingress proxy whose Host header it could mask; leave it out');
    }
  }
  const egress = egressOf(network ?? {}, allowInternetAccess);
  return egress === undefined ? undefined : validated(egress);
}

/**
 * Burrow's network update for E2B's `PUT /sandboxes/{id}/network`: the whole egress policy is replaced, as in E2B (a
 * field left out is cleared); the sandbox's mode and bandwidth limit stay.
 * @throws E2bError 400 naming the option Burrow cannot honour, or the malformed entry
 */
export function networkFromE2bUpdate(update: E2bNetworkUpdate, current: SandboxNetwork | undefined) {
  const request = validated(egressOf(update, update.allow_internet_access) ?? {});
  return current?.egressMbps === null || current?.egressMbps === undefined
    ? request
    : { ...request, egressMbps: current.egressMbps };
}

/**
 * E2B's view of a Burrow network: `allowInternetAccess` is false when the sandbox cannot reach the internet at large
 * (mode `none`, or every address denied), and `network` lists the rules.
 */
export function e2bNetworkView(network: SandboxNetwork | undefined) {
  if (network === undefined) return { allowInternetAccess: null, network: undefined };
  const closed = network.mode === 'none' || network.denyOut.includes(E2B_ALL_TRAFFIC);
  return {
    allowInternetAccess: !closed,
    network: { allowOut: network.allowOut, denyOut: network.denyOut, allowPublicTraffic: true },
  };
}

/** The egress lists E2B's fields ask for, or `undefined` when they ask for none. */
function egressOf(
  fields: Pick<E2bNetwork, 'allowOut' | 'denyOut' | 'egressProxy' | 'rules'>,
  allowInternetAccess: boolean | null | undefined,
): { allowOut?: string[]; denyOut?: string[] } | undefined {
  if (fields.egressProxy !== undefined && fields.egressProxy !== null) {
    refuse('network.egressProxy', 'Burrow sends egress out directly, through no SOCKS5 proxy; leave it out');
  }
  if (fields.rules !== undefined && fields.rules !== null && Object.keys(fields.rules).length > 0) {
    refuse('network.rules', 'Burrow does not rewrite egress requests; leave them out');
  }
  const allowOut = fields.allowOut ?? undefined;
  let denyOut = fields.denyOut ?? undefined;
  if (allowInternetAccess === false && !(denyOut ?? []).includes(E2B_ALL_TRAFFIC)) {
    denyOut = [...(denyOut ?? []), E2B_ALL_TRAFFIC];
  }
  if (allowOut === undefined && denyOut === undefined) return undefined;
  return { ...(allowOut === undefined ? {} : { allowOut }), ...(denyOut === undefined ? {} : { denyOut }) };
}

/** The lists checked by Burrow's own rules (IPv4 CIDRs or domains, at most 256 entries). */
function validated(egress: { allowOut?: string[]; denyOut?: string[] }): NetworkPolicyRequestParsed {
  const parsed = NetworkPolicyRequestSchema.safeParse(egress);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const where = issue === undefined ? 'network' : ['network', ...issue.path].join('.');
  throw new E2bError(400, `invalid request: ${where}: ${issue?.message ?? 'bad value'}`);
}

function refuse(what: string, why: string): never {
  throw new E2bError(400, `${what} is not supported by Burrow: ${why}`);
}
