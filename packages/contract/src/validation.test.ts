import { describe, expect, it } from 'vitest';
import { BatchWriteRequestSchema } from './files.js';
import { CreateApiKeyRequestSchema } from './keys.js';
import { CreateSandboxRequestSchema, ListSandboxesQuerySchema } from './sandbox.js';

// PostgreSQL refuses NUL in text columns: every string that reaches the store must refuse it at validation.
describe('NUL bytes are refused at validation', () => {
  it('in label keys and values', () => {
    expect(CreateSandboxRequestSchema.safeParse({ labels: { k: 'a\0b' } }).success).toBe(false);
    expect(CreateSandboxRequestSchema.safeParse({ labels: { 'a\0b': 'v' } }).success).toBe(false);
    expect(CreateSandboxRequestSchema.safeParse({ labels: { k: 'ab' } }).success).toBe(true);
  });
  it('in label filters', () => {
    expect(ListSandboxesQuerySchema.safeParse({ label: 'k=a\0b' }).success).toBe(false);
    expect(ListSandboxesQuerySchema.safeParse({ label: ['k=v', 'x=y'] }).success).toBe(true);
  });
  it('in API key names', () => {
    expect(CreateApiKeyRequestSchema.safeParse({ name: 'a\0b' }).success).toBe(false);
    expect(CreateApiKeyRequestSchema.safeParse({ name: 'ci bot' }).success).toBe(true);
  });
});

describe('exec requests', () => {
  it('refuse a command plus env over 1 MiB, accept one just under', async () => {
    const { ExecRequestSchema, MAX_COMMAND_BYTES } = await import('./exec.js');
    const big = 'x'.repeat(128 * 1024);
    expect(ExecRequestSchema.safeParse({ cmd: Array(20).fill(big) }).success).toBe(false);
    const under = Array(8).fill('x'.repeat(Math.floor(MAX_COMMAND_BYTES / 8) - 64));
    expect(ExecRequestSchema.safeParse({ cmd: ['echo', ...under] }).success).toBe(true);
    expect(ExecRequestSchema.safeParse({ cmd: ['true'], env: { A: 'y'.repeat(30_000) } }).success).toBe(true);
  });
});

describe('batch file writes', () => {
  it('refuse content that is not base64 when encoding is base64 (Node would decode it leniently)', () => {
    const ok = (content: string) =>
      BatchWriteRequestSchema.safeParse({ files: [{ path: '/x', content, encoding: 'base64' }] }).success;
    expect(ok('!!!notb64')).toBe(false);
    expect(ok('AAEC AA==')).toBe(false);
    expect(ok('A')).toBe(false);
    expect(ok('AAE=A')).toBe(false);
    expect(ok('AAE')).toBe(true);
    expect(ok('AAEC')).toBe(true);
    expect(ok('AA==')).toBe(true);
    expect(ok('')).toBe(true);
    expect(BatchWriteRequestSchema.safeParse({ files: [{ path: '/x', content: '!!!' }] }).success).toBe(true);
  });
});

describe('base64 request fields', () => {
  it('follow one rule in exec stdin and batch file contents, and name the field that breaks it', async () => {
    const { ExecRequestSchema } = await import('./exec.js');
    const stdin = (text: string) => ExecRequestSchema.safeParse({ cmd: ['cat'], stdin: text });
    const content = (text: string) =>
      BatchWriteRequestSchema.safeParse({ files: [{ path: '/x', content: text, encoding: 'base64' }] });
    for (const text of ['', 'aGk=', 'aGk']) {
      expect(stdin(text).success, text).toBe(true);
      expect(content(text).success, text).toBe(true);
    }
    for (const text of ['aGk-', 'aG k=', 'a', 'a=Gk']) {
      expect(stdin(text).error?.issues[0]?.path, text).toEqual(['stdin']);
      expect(content(text).error?.issues[0]?.path, text).toEqual(['files', 0, 'content']);
    }
  });
});
