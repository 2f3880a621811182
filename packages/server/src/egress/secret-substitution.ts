/** A secret as applied to one request (see `SecretService.egressSecrets`). */
export interface AppliedSecret {
  placeholder: string;
  value: string;
  /** Set this header to `format` with `{value}` replaced; null: replace the placeholder where it stands. */
  header: string | null;
  format: string | null;
}

/** Headers a proxy does not forward: they describe one connection, not the request. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'te',
  'trailer',
  'proxy-authorization',
]);

/**
 * The request line's target and headers to send upstream: hop-by-hop headers dropped; for each secret with a
 * `header`, that header replaced by its formatted value; every other secret's placeholder replaced by its value in
 * the target and in every header value. Names keep the sandbox's spelling and order.
 * @param rawHeaders name/value pairs as Node's `IncomingMessage.rawHeaders` gives them
 * @returns the target and `[name, value]` pairs
 */
export function substituteSecrets(
  target: string,
  rawHeaders: readonly string[],
  secrets: readonly AppliedSecret[],
): { target: string; headers: Array<[string, string]> } {
  const replaceAll = (text: string): string => {
    let out = text;
    for (const secret of secrets) if (secret.header === null) out = out.split(secret.placeholder).join(secret.value);
    return out;
  };
  const owned = new Set(secrets.flatMap((s) => (s.header === null ? [] : [s.header.toLowerCase()])));
  const headers: Array<[string, string]> = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string;
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || owned.has(lower)) continue;
    headers.push([name, replaceAll(rawHeaders[i + 1] as string)]);
  }
  for (const secret of secrets) {
    if (secret.header !== null)
      headers.push([secret.header, (secret.format ?? '{value}').split('{value}').join(secret.value)]);
  }
  return { target: replaceAll(target), headers };
}

/** Response headers to pass back to the sandbox: hop-by-hop ones dropped. */
export function responseHeaders(rawHeaders: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (!HOP_BY_HOP.has((rawHeaders[i] as string).toLowerCase()))
      out.push(rawHeaders[i] as string, rawHeaders[i + 1] as string);
  }
  return out;
}
