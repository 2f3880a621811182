/** Position after the last item of a page: the keyset (createdAt, id) of that item. */
export interface PageCursor {
  createdAt: string;
  id: string;
}

/** Encode a cursor as an opaque URL-safe string. */
export function encodeCursor(cursor: PageCursor): string {
  return Buffer.from(JSON.stringify([cursor.createdAt, cursor.id]), 'utf8').toString('base64url');
}

/**
 * Decode a cursor made by {@link encodeCursor}.
 * @returns the cursor, or null when `text` is not one
 */
export function decodeCursor(text: string): PageCursor | null {
  if (!/^[A-Za-z0-9_-]+$/.test(text)) return null;
  try {
    const value: unknown = JSON.parse(Buffer.from(text, 'base64url').toString('utf8'));
    if (!Array.isArray(value) || value.length !== 2) return null;
    const [createdAt, id] = value as unknown[];
    if (typeof createdAt !== 'string' || typeof id !== 'string') return null;
    if (Number.isNaN(Date.parse(createdAt)) || id.length === 0 || id.length > 64) return null;
    return { createdAt, id };
  } catch {
    return null;
  }
}
