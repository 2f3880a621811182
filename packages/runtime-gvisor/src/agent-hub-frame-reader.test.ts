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

/**
 * What a consumer sees, independent of how output frames were cut: consecutive output frames (`O`, `R`) of one type
 * joined into one (empty ones vanish into their neighbours), every other frame as it is.
 */
function normalize(frames: Frame[]): Frame[] {
  const runs: Array<{ type: string; payloads: Buffer[] }> = [];
  for (const frame of frames) {
    const last = runs[runs.length - 1];
    if ((frame.type === 'O' || frame.type === 'R') && last?.type === frame.type) last.payloads.push(frame.payload);
    else runs.push({ type: frame.type, payloads: [frame.payload] });
  }
  return runs
    .map((run) => ({ type: run.type, payload: Buffer.concat(run.payloads) }))
    .filter((frame) => !((frame.type === 'O' || frame.type === 'R') && frame.payload.length === 0));
}

/** Frames as `type:length:sha-ish` strings, for readable equality failures. */
function shapes(frames: Frame[]): string[] {
  return frames.map((frame) => `${frame.type}:${frame.payload.length}:${frame.payload.toString('base64').slice(-12)}`);
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
    { type: 'Z', payload: randomBytes(200_000) },
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
      expect(shapes(normalize(got))).toEqual(shapes(normalize(expected)));
      // A frame that is not output (here a 200 KB 'Z') comes whole, whatever the reads.
      if (maxPiece !== 1)
        expect(got.filter((frame) => frame.type === 'Z').map((f) => f.payload.length)).toEqual([200_000]);
    });
  }

  it('hands an output frame over as slices of the reads that carry it (no copy), in order', () => {
    const payload = randomBytes(1024 * 1024);
    const wireOne = Buffer.concat([encode('O', payload), encode('X', Buffer.from([0, 0, 0, 0]))]);
    const reads = split(wireOne, 3, 65_536).map((piece) => Buffer.from(piece)); // each read its own memory
    const got: Frame[] = [];
    const reader = new FrameReader((reason) => {
      throw new Error(reason);
    });
    reader.onFrame = (frame) => got.push(frame);
    for (const read of reads) reader.push(read);
    const pieces = got.filter((frame) => frame.type === 'O');
    expect(pieces.length).toBeGreaterThan(1);
    // Every piece shares the memory of one of the reads, and none is empty.
    expect(
      pieces.every((piece) => piece.payload.length > 0 && reads.some((read) => read.buffer === piece.payload.buffer)),
    ).toBe(true);
    expect(Buffer.concat(pieces.map((piece) => piece.payload)).equals(payload)).toBe(true);
    expect(got.map((frame) => frame.type).slice(-1)).toEqual(['X']);
  });

  it('a consumer that stops in the middle of an output frame gets the rest of it later, and nothing twice', () => {
    const payload = randomBytes(300_000);
    const reader = new FrameReader(() => undefined);
    const got: Frame[] = [];
    reader.onFrame = (frame) => {
      got.push({ type: frame.type, payload: Buffer.from(frame.payload) });
      if (got.length === 1) reader.onFrame = null;
    };
    for (const piece of split(Buffer.concat([encode('O', payload), encode('X', Buffer.alloc(4))]), 11, 65_536))
      reader.push(piece);
    expect(got.length).toBe(1);
    reader.onFrame = (frame) => got.push({ type: frame.type, payload: Buffer.from(frame.payload) });
    reader.push(Buffer.alloc(0));
    expect(shapes(normalize(got))).toEqual(
      shapes([
        { type: 'O', payload },
        { type: 'X', payload: Buffer.alloc(4) },
      ]),
    );
  });

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
    expect(shapes(normalize(second))).toEqual(shapes(normalize(frames.slice(1))));
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
