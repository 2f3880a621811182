import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { BASE64_RULE_MESSAGE, Base64Schema, isStandardBase64, STANDARD_BASE64_PATTERN } from './base64.js';

describe('isStandardBase64', () => {
  it('accepts the empty string', () => {
    expect(isStandardBase64('')).toBe(true);
  });

  it('accepts padded and unpadded standard base64', () => {
    for (const text of ['aGk=', 'aGk', 'aA==', 'aA', 'aGkh', '+/+/', 'AAEC/w==', 'AAEC/w']) {
      expect(isStandardBase64(text), text).toBe(true);
    }
  });

  it('refuses = anywhere but as the final padding, and padding that does not complete the group', () => {
    for (const text of ['aA==aGkh', 'a=Gk', '=', '==', 'aGkh=', 'aGkh==', 'aA=', 'aGk==', 'aA===']) {
      expect(isStandardBase64(text), text).toBe(false);
    }
  });

  it('refuses the URL-safe alphabet', () => {
    expect(isStandardBase64('-_-_')).toBe(false);
    expect(isStandardBase64('aGk-')).toBe(false);
    expect(isStandardBase64('_w==')).toBe(false);
  });

  it('refuses whitespace and line breaks', () => {
    for (const text of ['aG k=', ' aGk=', 'aGk= ', 'aGkh\naGkh', 'aGkh\r\n', '\taGk']) {
      expect(isStandardBase64(text), JSON.stringify(text)).toBe(false);
    }
  });

  it('refuses a length that is 1 more than a multiple of 4', () => {
    expect(isStandardBase64('a')).toBe(false);
    expect(isStandardBase64('aGkha')).toBe(false);
    expect(isStandardBase64('aGkha=')).toBe(false);
  });

  it('refuses other characters, including non-ASCII ones', () => {
    for (const text of ['aGk!', 'aGk.', 'aGké', 'aGk\u0000', 'aGk\u{1F600}']) {
      expect(isStandardBase64(text), JSON.stringify(text)).toBe(false);
    }
  });

  it('refuses a last character with bits beyond the last byte, which would decode to other bytes', () => {
    expect(isStandardBase64('aB==')).toBe(false);
    expect(isStandardBase64('aB')).toBe(false);
    expect(isStandardBase64('aGl=')).toBe(false);
    expect(isStandardBase64('aGl')).toBe(false);
  });

  it('accepts what Node writes for any bytes, and decodes it back to exactly those bytes', () => {
    for (let size = 0; size < 64; size++) {
      const bytes = randomBytes(size);
      const padded = bytes.toString('base64');
      for (const text of [padded, padded.replace(/=+$/, '')]) {
        expect(isStandardBase64(text), text).toBe(true);
        expect(Buffer.from(text, 'base64').equals(bytes)).toBe(true);
      }
    }
  });

  it('checks a 14 MB string', () => {
    const text = randomBytes(10_000_000).toString('base64');
    expect(isStandardBase64(text)).toBe(true);
    expect(isStandardBase64(`${text.slice(0, 7_000_000)}\n${text.slice(7_000_000)}`)).toBe(false);
  });

  it('agrees with the pattern published in the OpenAPI document', () => {
    const alphabet = ['A', 'B', 'Q', 'g', 'w', 'E', '/', '+', '=', '-', ' '];
    const texts = [''];
    for (let length = 1; length <= 4; length++) {
      for (const text of texts.filter((t) => t.length === length - 1)) {
        for (const c of alphabet) texts.push(text + c);
      }
    }
    for (const text of texts) {
      for (const prefixed of [text, `aGkh${text}`]) {
        expect(STANDARD_BASE64_PATTERN.test(prefixed), prefixed).toBe(isStandardBase64(prefixed));
      }
    }
  });
});

describe('Base64Schema', () => {
  it('refuses with the rule and keeps a chained size limit', () => {
    const result = Base64Schema.safeParse('aGk-');
    expect(result.error?.issues[0]?.message).toBe(BASE64_RULE_MESSAGE);
    expect(Base64Schema.max(4).safeParse('aGkhaA==').success).toBe(false);
    expect(Base64Schema.max(4).safeParse('aGk=').success).toBe(true);
  });
});
