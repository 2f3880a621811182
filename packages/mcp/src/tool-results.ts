/**
 * What the tools answer: JSON text for the model, and errors as `isError` results that carry the API's stable code,
 * its message, its hint and the request id, so an agent can act on them (or a person can find them in the log).
 */
import type { SandboxInfo } from '@burrow/sdk';
import { BurrowError } from '@burrow/sdk/errors';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';

/** A successful tool answer: `value` as indented JSON text, and as structured content. */
export function jsonResult(value: Record<string, unknown>): CallToolResult {
  return { content: [{ type: 'text', text: JSON.stringify(value, null, 2) }], structuredContent: value };
}

/**
 * A failed tool call as an `isError` result: `error <code>: <message>`, then `hint:` and `request id:` lines when
 * known; `structuredContent.error` holds the same fields.
 */
export function errorResult(err: unknown): CallToolResult {
  const error =
    err instanceof BurrowError
      ? {
          code: err.code as string,
          message: err.message,
          ...(err.hint === undefined ? {} : { hint: err.hint }),
          ...(err.requestId === '' ? {} : { requestId: err.requestId }),
        }
      : { code: 'internal_error', message: err instanceof Error ? err.message : String(err) };
  const lines = [`error ${error.code}: ${error.message}`];
  if ('hint' in error) lines.push(`hint: ${error.hint}`);
  if ('requestId' in error) lines.push(`request id: ${error.requestId}`);
  return { isError: true, content: [{ type: 'text', text: lines.join('\n') }], structuredContent: { error } };
}

/** The fields of a sandbox record an agent acts on (the whole record is long: conditions, every policy). */
export function sandboxSummary(info: SandboxInfo): Record<string, unknown> {
  return {
    id: info.id,
    state: info.state,
    template: info.template,
    resources: info.resources,
    labels: info.labels,
    expiry: info.expiry,
    parentId: info.lineage.parentId,
    createdAt: info.createdAt,
  };
}

/** Text cut to at most `limitBytes` UTF-8 bytes (on a character boundary), and how many bytes were left out. */
export function truncateText(text: string, limitBytes: number): { text: string; omittedBytes: number } {
  const bytes = Buffer.from(text, 'utf8');
  if (bytes.byteLength <= limitBytes) return { text, omittedBytes: 0 };
  let end = limitBytes;
  // Back off to the start of a UTF-8 sequence: continuation bytes are 0b10xxxxxx.
  while (end > 0 && ((bytes[end] ?? 0) & 0xc0) === 0x80) end -= 1;
  return { text: bytes.subarray(0, end).toString('utf8'), omittedBytes: bytes.byteLength - end };
}
