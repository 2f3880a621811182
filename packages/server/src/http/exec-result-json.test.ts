import { ExecResultSchema } from '@burrow/contract';
import { describe, expect, it } from 'vitest';
import { execResultJson } from './exec-result-json.js';

describe('execResultJson', () => {
  it('is JSON.stringify of the result, byte for byte, for exits, signals, timeouts and any output bytes', () => {
    const outputs = [Buffer.alloc(0), Buffer.from([0, 255, 34, 92, 10, 0xe2]), Buffer.alloc(70_000, 0xfb)];
    const exits = [
      { exitCode: 0, signal: null, timedOut: false },
      { exitCode: null, signal: 'SIGKILL', timedOut: true },
      { exitCode: 255, signal: null, timedOut: false },
    ];
    for (const exit of exits) {
      for (const out of outputs) {
        const result = ExecResultSchema.parse({
          ...exit,
          durationMs: 12.5,
          stdout: out.toString('base64'),
          stderr: Buffer.from('err"\\').toString('base64'),
          truncated: out.length > 1000,
        });
        expect(execResultJson(result)).toBe(JSON.stringify(result));
        expect(ExecResultSchema.parse(JSON.parse(execResultJson(result)))).toEqual(result);
      }
    }
  });
});
