/** Preview URLs of sandbox ports (docs/network.md, "Ingress and preview URLs"). */
export interface PreviewConfig {
  /** Domain under which `<port>-<sandbox label>.<domain>` names a sandbox port. @default 'localhost' */
  domain: string;
  /** Port that preview URLs name, when a front proxy listens on another than the server. @default the server's own */
  urlPort: number | null;
}

const DOMAIN = /^(?=.{1,200}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;

/**
 * {@link PreviewConfig} from BURROW_PREVIEW_DOMAIN and BURROW_PREVIEW_URL_PORT.
 * @throws RangeError when the domain is no host name or the port is outside 1-65535
 */
export function previewConfigFrom(env: Readonly<Record<string, string | undefined>>): PreviewConfig {
  const domain = (env.BURROW_PREVIEW_DOMAIN || 'localhost').toLowerCase().replace(/\.$/, '');
  if (!DOMAIN.test(domain)) {
    throw new RangeError(`BURROW_PREVIEW_DOMAIN must be a host name such as preview.example.com, got ${domain}`);
  }
  const portText = env.BURROW_PREVIEW_URL_PORT ?? '';
  const urlPort = portText === '' ? null : Number(portText);
  if (urlPort !== null && !(Number.isInteger(urlPort) && urlPort >= 1 && urlPort <= 65535)) {
    throw new RangeError(`BURROW_PREVIEW_URL_PORT must be a port of 1-65535, got ${portText}`);
  }
  return { domain, urlPort };
}
