import { describe, expect, it } from 'vitest';
import { fromBase64Strict, resultFromWire } from './command-result.js';
import { ProtocolError } from './errors.js';

describe('exec answers decoded without z.base64()', () => {
  it('decodes padded base64 exactly, bytes that are not UTF-8 included', () => {
    const bytes = Buffer.from([0, 255, 0xe2, 0x82, 1, 2, 3]);
    for (let n = 0; n <= bytes.length; n++) {
      expect(Buffer.from(fromBase64Strict(bytes.subarray(0, n).toString('base64')))).toEqual(bytes.subarray(0, n));
    }
    const result = resultFromWire({
      exitCode: 0,
      signal: null,
      timedOut: false,
      durationMs: 1,
      stdout: Buffer.from('hé\0').toString('base64'),
      stderr: '',
      truncated: false,
    });
    expect(result.stdout).toBe('hé\0');
    expect(result.stderrBytes.byteLength).toBe(0);
  });

  it('refuses text that is not padded base64 (Buffer.from would skip the bad characters)', () => {
    for (const text of ['A*A=', 'AAAA\n', 'AAA', 'AA=A', '!!!!', 'AAAAA===']) {
      expect(() => fromBase64Strict(text), text).toThrow(ProtocolError);
    }
  });
});
