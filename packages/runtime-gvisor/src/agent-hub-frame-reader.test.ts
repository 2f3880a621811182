import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { type Frame, FrameReader } from './agent-hub.js';

function encode(type: string, payload: Buffer): Buffer {
  const header = Buffer.alloc(5);
  header.write(type, 0, 'latin1');
  header.writeUInt32BE(payload.length, 1);
  return Buffer.concat([header, payload]);
}

/** Deterministic pseudo-random split points (a small LCG: the same cuts on every run). */
function split(data: Buffer, seed: number, maxPiece: number): Buffer[] {
  const pieces: Buffer[] = [];
  let state = seed;
  for (let at = 0; at < data.length; ) {
    state = (state * 1_103_515_245 + 12_345) % 2 ** 31;
    const size = 1 + (state % maxPiece);
    pieces.push(data.subarray(at, at + size));
    at += size;
  }
  return pieces;
}

describe('FrameReader', () => {
  // Empty frames, frames inside one read, headers split across reads, and 1 MiB frames over 64 KiB reads.
  const frames: Frame[] = [
    { type: 'P', payload: Buffer.from([0, 0, 0, 7]) },
    { type: 'O', payload: Buffer.alloc(0) },
    { type: 'O', payload: randomBytes(1024 * 1024) },
    { type: 'R', payload: Buffer.from([0xff, 0x00, 0xe2, 0x82]) },
    { type: 'O', payload: randomBytes(3) },
    { type: 'O', payload: randomBytes(1024 * 1024) },
    { type: 'R', payload: randomBytes(70_000) },
    { type: 'X', payload: Buffer.from([0, 0, 1, 0]) },
  ];
  const wire = Buffer.concat(frames.map((frame) => encode(frame.type, frame.payload)));
  const small = frames.filter((frame) => frame.payload.length < 100_000);
  const smallWire = Buffer.concat(small.map((frame) => encode(frame.type, frame.payload)));

  for (const [name, maxPiece] of [
    ['bytes one at a time (headers split everywhere)', 1],
    ['small reads', 300],
    ['64 KiB reads', 65_536],
    ['everything in one read', wire.length],
  ] as const) {
    it(`gives every frame back exactly: ${name}`, () => {
      const got: Frame[] = [];
      const reader = new FrameReader((reason) => {
        throw new Error(reason);
      });
      reader.onFrame = (frame) => got.push({ type: frame.type, payload: Buffer.from(frame.payload) });
      // Byte by byte only over the small frames (2 MiB of one-byte reads would take seconds).
      const expected = maxPiece === 1 ? small : frames;
      const pieces = maxPiece === 1 ? [...smallWire].map((byte) => Buffer.from([byte])) : split(wire, 42, maxPiece);
      for (const piece of pieces) reader.push(piece);
      expect(got.map((frame) => frame.type)).toEqual(expected.map((frame) => frame.type));
      expect(got.map((frame, i) => frame.payload.equals(expected[i]?.payload as Buffer))).toEqual(
        expected.map(() => true),
      );
    });
  }

  it('queues while nobody consumes, and a consumer that stops mid-read leaves the rest for the next one', () => {
    const reader = new FrameReader(() => undefined);
    const first: Frame[] = [];
    const second: Frame[] = [];
    // Nobody consumes yet: everything is queued.
    for (const piece of split(wire, 7, 50_000)) reader.push(piece);
    // The first consumer takes one frame and stops (as the hub does after a hello): the rest stays queued.
    reader.onFrame = (frame) => {
      first.push(frame);
      reader.onFrame = null;
    };
    reader.push(Buffer.alloc(0));
    expect(first.map((frame) => frame.type)).toEqual(['P']);
    reader.onFrame = (frame) => second.push({ type: frame.type, payload: Buffer.from(frame.payload) });
    reader.push(Buffer.alloc(0));
    expect(second.map((frame) => frame.type)).toEqual(frames.slice(1).map((frame) => frame.type));
    expect(second.map((frame, i) => frame.payload.equals(frames[i + 1]?.payload as Buffer))).toEqual(
      frames.slice(1).map(() => true),
    );
  });

  it('a push from inside a frame consumer keeps the order of the bytes', () => {
    const reader = new FrameReader(() => undefined);
    const got: string[] = [];
    const tail = encode('X', Buffer.from('late'));
    let pushed = false;
    reader.onFrame = (frame) => {
      got.push(`${frame.type}:${frame.payload.toString('latin1')}`);
      if (!pushed) {
        pushed = true;
        reader.push(tail);
      }
    };
    reader.push(Buffer.concat([encode('O', Buffer.from('a')), encode('O', Buffer.from('b'))]));
    expect(got).toEqual(['O:a', 'O:b', 'X:late']);
  });

  it('reports a frame above 1 MiB and stops', () => {
    const bad: string[] = [];
    const got: Frame[] = [];
    const reader = new FrameReader((reason) => bad.push(reason));
    reader.onFrame = (frame) => got.push(frame);
    const header = Buffer.from([0x4f, 0, 0x10, 0, 1]); // 'O', 1 MiB + 1
    reader.push(Buffer.concat([encode('P', Buffer.alloc(4)), header, Buffer.alloc(100)]));
    expect(got.map((frame) => frame.type)).toEqual(['P']);
    expect(bad).toEqual([`frame of ${1024 * 1024 + 1} bytes`]);
  });
});
