/**
 * `streamChunks` on real Node streams (PassThrough, as an upload's source is): chunks pass through uncopied and in
 * order, the stream is paused past the bound, errors and early exits behave like the built-in iterator. Fast; no I/O.
 */
import { PassThrough, Readable } from 'node:stream';
import { describe, expect, test } from 'vitest';
import { streamChunks } from './stream-chunks.js';

const collect = async (source: AsyncIterable<unknown>, maxQueuedBytes?: number): Promise<unknown[]> => {
  const out: unknown[] = [];
  for await (const chunk of streamChunks(source, maxQueuedBytes)) out.push(chunk);
  return out;
};

describe('streamChunks', () => {
  test('yields the very buffers written, in order, where the built-in iterator concatenates them', async () => {
    const written = Array.from({ length: 20 }, (_, i) => Buffer.alloc(64 * 1024, i));
    const builtIn = new PassThrough({ highWaterMark: 1024 * 1024 });
    for (const b of written) builtIn.write(b);
    builtIn.end();
    const concatenated: Buffer[] = [];
    for await (const chunk of builtIn) concatenated.push(chunk as Buffer);
    expect(concatenated.length).toBeLessThan(written.length);

    const source = new PassThrough({ highWaterMark: 1024 * 1024 });
    for (const b of written) source.write(b);
    source.end();
    const chunks = await collect(source);
    expect(chunks).toHaveLength(written.length);
    for (const [i, chunk] of chunks.entries()) expect(chunk).toBe(written[i]);
  });

  test('pauses the stream while maxQueuedBytes or more wait, and resumes it as they are consumed', async () => {
    const source = new PassThrough({ highWaterMark: 16 });
    let paused = 0;
    const iterator = streamChunks(source, 100)[Symbol.asyncIterator]();
    const first = iterator.next();
    for (let i = 0; i < 5; i++) source.write(Buffer.alloc(40));
    const firstChunk = await first;
    expect((firstChunk.value as Buffer).length).toBe(40);
    await new Promise((r) => setImmediate(r));
    if (source.isPaused()) paused++;
    expect(paused).toBe(1);
    source.end();
    let rest = 0;
    for (let next = await iterator.next(); !next.done; next = await iterator.next())
      rest += (next.value as Buffer).length;
    expect(rest).toBe(160);
  });

  test('an error on the stream is thrown; a destroy without one is a premature close', async () => {
    const failing = new PassThrough();
    failing.write(Buffer.from('abc'));
    setImmediate(() => failing.destroy(new Error('pausing')));
    await expect(collect(failing)).rejects.toThrow('pausing');

    const cut = new PassThrough();
    setImmediate(() => cut.destroy());
    await expect(collect(cut)).rejects.toMatchObject({ code: 'ERR_STREAM_PREMATURE_CLOSE' });

    const already = new PassThrough();
    already.destroy(new Error('gone before'));
    await expect(collect(already)).rejects.toThrow('gone before');
  });

  test('leaving the loop early destroys the stream; an empty stream yields nothing', async () => {
    const source = new PassThrough();
    source.write(Buffer.from('one'));
    source.write(Buffer.from('two'));
    for await (const _ of streamChunks(source)) break;
    expect(source.destroyed).toBe(true);

    const empty = new PassThrough();
    empty.end();
    expect(await collect(empty)).toEqual([]);
  });

  test('anything else (object mode, a generator) is iterated as it is', async () => {
    expect(await collect(Readable.from(['a', 'b']))).toEqual(['a', 'b']);
    expect(
      await collect(
        (async function* () {
          yield Buffer.from('x');
        })(),
      ),
    ).toEqual([Buffer.from('x')]);
  });
});
