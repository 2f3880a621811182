import { describe, expect, it } from 'vitest';
import {
  EXEC_FRAME_MAX_PAYLOAD_BYTES,
  ExecFrameChannel,
  ExecFrameReader,
  execFrame,
  execFrameHeader,
} from './exec-frames.js';

const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

describe('ExecFrameReader', () => {
  it('reads frames split at every byte, data in pieces and control frames whole', () => {
    const wire = new Uint8Array([
      ...execFrame(ExecFrameChannel.control, '{"type":"started"}'),
      ...execFrame(ExecFrameChannel.stdout, new Uint8Array([0, 255, 10])),
      ...execFrame(ExecFrameChannel.stderr, new Uint8Array()),
      ...execFrame(ExecFrameChannel.control, ''),
    ]);
    const reader = new ExecFrameReader();
    const got: Array<{ channel: number; payload: Uint8Array }> = [];
    for (const byte of wire) got.push(...reader.push(new Uint8Array([byte])));
    expect(reader.atBoundary).toBe(true);
    expect(got.filter((f) => f.channel === ExecFrameChannel.control).map((f) => text(f.payload))).toEqual([
      '{"type":"started"}',
      '',
    ]);
    const stdout = got.filter((f) => f.channel === ExecFrameChannel.stdout).flatMap((f) => [...f.payload]);
    expect(stdout).toEqual([0, 255, 10]);
    expect(got.some((f) => f.channel === ExecFrameChannel.stderr)).toBe(false);
  });

  it('gives views of one chunk holding several frames, and says when it stops mid-frame', () => {
    const reader = new ExecFrameReader();
    const frames = reader.push(
      new Uint8Array([...execFrame(ExecFrameChannel.stdout, 'ab'), ...execFrame(ExecFrameChannel.stderr, 'cd'), 1]),
    );
    expect(frames.map((f) => [f.channel, text(f.payload)])).toEqual([
      [1, 'ab'],
      [2, 'cd'],
    ]);
    expect(reader.atBoundary).toBe(false);
  });

  it('refuses a frame longer than the limit', () => {
    const reader = new ExecFrameReader();
    expect(() => reader.push(execFrameHeader(ExecFrameChannel.stdin, EXEC_FRAME_MAX_PAYLOAD_BYTES + 1))).toThrow(
      RangeError,
    );
  });
});
