import { ID_ALPHABET, ID_RANDOM_LENGTH } from '@burrow/contract';

/** What a preview host name names. */
export type PreviewTarget =
  | { kind: 'port'; sandboxId: string; port: number }
  /** `<digits>-sbx-…` whose digits are no port (0, above 65535). */
  | { kind: 'bad_port'; sandboxId: string; text: string };

const LABEL = new RegExp(`^(\\d{1,6})-sbx-([${ID_ALPHABET}]{${ID_RANDOM_LENGTH}})$`);

/**
 * The host label of `port` of sandbox `sandboxId`: `<port>-sbx-<20 base32>`. Sandbox ids (`sbx_…`) hold an
 * underscore, which no host label may; their random part never holds `-` or `_`, so the label maps back to one id.
 */
export function previewLabel(sandboxId: string, port: number): string {
  return `${port}-${sandboxId.replace('_', '-')}`;
}

/**
 * Hosts of preview URLs under one domain (`<label>.<previewDomain>[:<port>]`).
 * @example
 * new PreviewHosts('localhost').parse('8000-sbx-0123456789abcdefghjk.localhost:7070')
 */
export class PreviewHosts {
  private readonly suffix: string;

  /** @param previewDomain lowercase domain, no trailing dot (`localhost`, `preview.example.com`) */
  constructor(readonly previewDomain: string) {
    this.suffix = `.${previewDomain}`;
  }

  /**
   * The target a `Host` header names, or null when it is no preview host (the API's own host, anything else).
   * Case-insensitive; a trailing dot and the port are ignored.
   */
  parse(host: string | undefined): PreviewTarget | null {
    if (host === undefined) return null;
    let name = host.toLowerCase();
    const colon = name.lastIndexOf(':');
    if (colon !== -1 && !name.endsWith(']')) name = name.slice(0, colon);
    if (name.endsWith('.')) name = name.slice(0, -1);
    if (!name.endsWith(this.suffix)) return null;
    const match = LABEL.exec(name.slice(0, -this.suffix.length));
    if (match?.[1] === undefined || match[2] === undefined) return null;
    const sandboxId = `sbx_${match[2]}`;
    const port = Number(match[1]);
    if (port < 1 || port > 65535 || match[1].startsWith('0')) return { kind: 'bad_port', sandboxId, text: match[1] };
    return { kind: 'port', sandboxId, port };
  }

  /** `http://<label>.<previewDomain>:<serverPort>/`. */
  url(sandboxId: string, port: number, serverPort: number, scheme = 'http'): string {
    return `${scheme}://${previewLabel(sandboxId, port)}${this.suffix}:${serverPort}/`;
  }
}
