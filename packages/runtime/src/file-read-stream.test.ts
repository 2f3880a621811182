import { randomBytes } from 'node:crypto';
import { mkdtemp, open, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileReadStream } from './file-read-stream.js';

let dir: string;
let path: string;
const content = randomBytes(5 * 1024 * 1024 + 123);

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'burrow-file-read-stream-'));
  path = join(dir, 'data.bin');
  await writeFile(path, content);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function openStream(): Promise<FileReadStream> {
  const handle = await open(path, 'r');
  return new FileReadStream(handle, (await handle.stat()).size);
}

/** A sink that completes each write only when `release` is called: a client that reads when it likes. */
function heldSink() {
  const chunks: Buffer[] = [];
  const pending: (() => void)[] = [];
  const sink = new Writable({
    highWaterMark: 0,
    write(chunk: Buffer, _encoding, callback) {
      // Copied: the stream reuses its buffers once the write is done.
      chunks.push(Buffer.from(chunk));
      pending.push(() => callback());
    },
  });
  return { sink, chunks, pending };
}

describe('FileReadStream', () => {
  it('reads byte-exact as a plain Readable', async () => {
    const stream = await openStream();
    const chunks: Buffer[] = [];
    for await (const c of stream) chunks.push(c as Buffer);
    expect(Buffer.compare(Buffer.concat(chunks), content)).toBe(0);
  });

  it('sendTo writes byte-exact, one chunk in flight at a time, and closes its handle', async () => {
    const stream = await openStream();
    const { sink, chunks, pending } = heldSink();
    const closed = new Promise<void>((resolve) => stream.once('close', () => resolve()));
    const sent = stream.sendTo(sink);
    // A sink that never finishes its writes holds the stream at one written chunk (plus one read ahead).
    await new Promise((r) => setTimeout(r, 100));
    expect(chunks.length).toBe(1);
    // Then a sink that finishes every write: the rest follows.
    const drained = setInterval(() => {
      for (const next of pending.splice(0)) next();
    }, 2);
    try {
      await sent;
    } finally {
      clearInterval(drained);
    }
    await sent;
    await closed;
    expect(Buffer.compare(Buffer.concat(chunks), content)).toBe(0);
    expect(stream.destroyed).toBe(true);
  });

  it('sendTo stops at the next chunk when the stream is destroyed (a pause) and rejects', async () => {
    const stream = await openStream();
    const { sink, chunks, pending } = heldSink();
    const sent = stream.sendTo(sink);
    await new Promise((r) => setTimeout(r, 50));
    stream.destroy(new Error('sandbox is pausing'));
    for (const next of pending.splice(0)) next();
    await expect(sent).rejects.toThrow('sandbox is pausing');
    expect(chunks.length).toBeLessThan(6);
    await new Promise<void>((resolve) => (stream.closed ? resolve() : stream.once('close', () => resolve())));
  });

  it('sendTo rejects when the file shrank below its size at open', async () => {
    const handle = await open(path, 'r');
    const stream = new FileReadStream(handle, content.length + 10);
    const { sink, pending } = heldSink();
    const sent = stream.sendTo(sink);
    const drained = setInterval(() => {
      for (const next of pending.splice(0)) next();
    }, 2);
    try {
      await expect(sent).rejects.toThrow('shrank');
    } finally {
      clearInterval(drained);
    }
  });
});
