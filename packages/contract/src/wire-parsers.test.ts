import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { renderWireParsers, WIRE_SCHEMAS } from '../scripts/generate-wire-parsers.js';
import * as contract from './index.js';
import * as wire from './wire.js';

const SCHEMAS: Record<string, unknown> = contract;

const SANDBOX = {
  id: 'sbx_rnfhabagha1kpyn1s0zr',
  template: 'base',
  templateId: '3d639a5bec4acd7dea5044ee62b4e03e7bdfaab134e93bb24313e7a2178bd771',
  state: 'running',
  conditions: [{ type: 'Ready', status: 'True', reason: 'Started', message: 'ok', at: '2026-12-02T01:45:13.014Z' }],
  env: { A: 'b' },
  cwd: '/root',
  hostname: 'sbx-rnfhabagha1kpyn1s0zr',
  resources: { cpuCount: 1, memoryMiB: 512, diskMiB: 2048 },
  labels: { agent: 'demo' },
  timeoutMs: 3_600_000,
  timeoutAction: 'delete',
  idleTimeoutMs: null,
  maxAgeMs: null,
  pausedRetentionMs: null,
  snapshotKeepLast: null,
  expiresAt: null,
  expiry: null,
  idleDeadlineAt: null,
  timeoutAt: '2026-12-02T02:45:09.390Z',
  desiredState: 'running',
  autoResume: true,
  keeps: { filesystem: true, memory: true },
  lineage: { parentId: null, snapshotId: null },
  quarantine: null,
  createdAt: '2026-12-02T01:45:09.390Z',
  updatedAt: '2026-12-02T01:45:13.014Z',
};

/** Inputs each parser must answer exactly as its schema: accepted ones with the same value, rejected ones with INVALID. */
const SAMPLES: Array<[keyof typeof contract, unknown]> = [
  ['SandboxSchema', SANDBOX],
  ['SandboxSchema', { ...SANDBOX, extra: 'dropped' }],
  ['SandboxSchema', { ...SANDBOX, quarantine: undefined }],
  ['SandboxSchema', { ...SANDBOX, state: 'flying' }],
  ['SandboxSchema', { ...SANDBOX, createdAt: '2026-12-02' }],
  ['SandboxSchema', { ...SANDBOX, resources: { cpuCount: 1, memoryMiB: 512.5, diskMiB: 2048 } }],
  ['SandboxSchema', { ...SANDBOX, env: { A: 1 } }],
  ['SandboxListSchema', { items: [SANDBOX], nextCursor: null }],
  ['ExecServerFrameSchema', { type: 'started' }],
  ['ExecServerFrameSchema', { type: 'exit', exitCode: 0, signal: null, timedOut: false, durationMs: 3.5 }],
  ['ExecServerFrameSchema', { type: 'exit', exitCode: 256, signal: null, timedOut: false, durationMs: 3 }],
  ['ExecServerFrameSchema', { type: 'error', error: { code: 'sandbox_not_found', message: 'no', requestId: 'r' } }],
  ['ExecServerFrameSchema', { type: 'nope' }],
  [
    'ExecResultSchema',
    { exitCode: 0, signal: null, timedOut: false, durationMs: 1, stdout: 'aGk=', stderr: '', truncated: false },
  ],
  [
    'ExecResultSchema',
    { exitCode: 0, signal: null, timedOut: false, durationMs: 1, stdout: 'a Gk=', stderr: '', truncated: false },
  ],
  [
    'ExecAnswerSchema',
    { exitCode: 0, signal: null, timedOut: false, durationMs: 1, stdout: 'a Gk=', stderr: '', truncated: false },
  ],
  [
    'ErrorEnvelopeSchema',
    { error: { code: 'conflict', message: 'm', hint: 'h', details: { x: [1] }, requestId: 'r' } },
  ],
  ['ErrorEnvelopeSchema', { error: { code: 'no_such_code', message: 'm', requestId: 'r' } }],
];

describe('precompiled wire parsers', () => {
  it('are what the generator writes from the current schemas (run npm run wire-parsers -w @burrow/contract)', async () => {
    const committed = await readFile(new URL('./generated/wire-parsers.ts', import.meta.url), 'utf8');
    expect(committed).toBe(renderWireParsers());
  });

  it('answer as their schema does, value for value', () => {
    for (const [schemaName, input] of SAMPLES) {
      const schema = SCHEMAS[schemaName] as z.ZodType;
      const parser = (wire as unknown as Record<string, wire.WireParser<unknown>>)[
        `${schemaName.replace(/Schema$/, '')}Parser`
      ];
      const expected = schema.safeParse(input);
      const actual = parser?.parse(input);
      expect({ schemaName, input, value: actual }).toEqual({
        schemaName,
        input,
        value: expected.success ? expected.data : wire.INVALID,
      });
    }
  });

  it('reject what is not an object of the right shape, as every schema does', () => {
    for (const schemaName of WIRE_SCHEMAS) {
      const parser = (wire as unknown as Record<string, wire.WireParser<unknown>>)[
        `${schemaName.replace(/Schema$/, '')}Parser`
      ];
      expect(parser?.schemaName).toBe(schemaName);
      for (const input of [null, undefined, 'x', 1, [], {}]) {
        expect((SCHEMAS[schemaName] as z.ZodType).safeParse(input).success).toBe(false);
        expect(parser?.parse(input)).toBe(wire.INVALID);
      }
    }
  });
});
