import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { getIntoFile } from './node-file-download.js';

const body = randomBytes(3 * 1024 * 1024 + 17);
let server: Server;
let base: string;
let dir: string;

/** A fake server: each path answers one way a real or broken server could. */
const routes: Record<string, (res: ServerResponse) => void> = {
  '/ok': (res) => {
    res.writeHead(200, { 'content-length': body.length, 'x-request-id': 'req_ok' });
    // Uneven writes, with pauses, so reads land anywhere in the receive buffers.
    let at = 0;
    const next = () => {
      if (at >= body.length) return void res.end();
      const size = 1 + Math.floor(Math.random() * 300_000);
      res.write(body.subarray(at, at + size));
      at += size;
      setImmediate(next);
    };
    next();
  },
  '/empty': (res) => {
    res.writeHead(200, { 'content-length': 0 });
    res.end();
  },
  '/chunked': (res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    res.end(body.subarray(0, 100));
  },
  '/missing': (res) => {
    const text = JSON.stringify({ error: { code: 'file_not_found', message: 'no', requestId: 'req_x' } });
    res.writeHead(404, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  },
  '/short': (res) => {
    res.writeHead(200, { 'content-length': body.length });
    res.write(body.subarray(0, 1000), () => res.destroy());
  },
};

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'burrow-sdk-download-'));
  server = createServer((req, res) => routes[new URL(req.url ?? '/', 'http://x').pathname]?.(res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  await rm(dir, { recursive: true, force: true });
});

describe('getIntoFile', () => {
  it('writes a 200 body byte-exact, reporting progress up to its size', async () => {
    const local = join(dir, 'ok.bin');
    const seen: number[] = [];
    const outcome = await getIntoFile(new URL(`${base}/ok?path=%2Fa`), { authorization: 'Bearer k' }, local, {
      onProgress: (n) => seen.push(n),
    });
    expect(outcome).toEqual({ kind: 'done', sizeBytes: body.length });
    expect((await readFile(local)).equals(body)).toBe(true);
    expect(seen.at(-1)).toBe(body.length);
  });

  it('creates an empty file for an empty body', async () => {
    const local = join(dir, 'empty.bin');
    expect(await getIntoFile(new URL(`${base}/empty`), {}, local)).toEqual({ kind: 'done', sizeBytes: 0 });
    expect((await readFile(local)).length).toBe(0);
  });

  it('answers unsupported for a body without Content-Length, and an error answer whole', async () => {
    expect(await getIntoFile(new URL(`${base}/chunked`), {}, join(dir, 'c.bin'))).toEqual({ kind: 'unsupported' });
    const answer = await getIntoFile(new URL(`${base}/missing`), {}, join(dir, 'm.bin'));
    expect(answer).toMatchObject({ kind: 'answer', status: 404 });
    expect(answer.kind === 'answer' && JSON.parse(answer.text).error.code).toBe('file_not_found');
  });

  it('rejects a body cut short of its Content-Length, and a header with a line break', async () => {
    await expect(getIntoFile(new URL(`${base}/short`), {}, join(dir, 's.bin'))).rejects.toThrow();
    await expect(getIntoFile(new URL(`${base}/ok`), { a: 'b\r\nc: d' }, join(dir, 'h.bin'))).rejects.toThrow(
      'invalid header',
    );
  });
});
