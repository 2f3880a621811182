import { describe, expect, test } from 'vitest';
import { decodeCursor, encodeCursor } from './cursor.js';

describe('page cursor', () => {
  test('round-trips', () => {
    const c = { createdAt: '2026-11-29T08:00:00.000Z', id: 'sbx_0123456789abcdefghjk' };
    expect(decodeCursor(encodeCursor(c))).toEqual(c);
  });
  test.each([
    '',
    'not base64!',
    Buffer.from('{"a":1}').toString('base64url'),
    Buffer.from('["nope","x"]').toString('base64url'),
    Buffer.from('[1,2]').toString('base64url'),
  ])('rejects %j', (text) => {
    expect(decodeCursor(text)).toBeNull();
  });
});
