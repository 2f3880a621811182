import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { sendPrefixedBinary } from './ws-prefixed-frame.js';

describe('sendPrefixedBinary', () => {
  let server: WebSocketServer;
  let url: string;

  beforeAll(async () => {
    server = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    await new Promise<void>((resolve) => server.once('listening', () => resolve()));
    url = `ws://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it('delivers [prefix, ...chunk] as one binary message at every length encoding, in order with text', async () => {
    // Around the 7-bit, 16-bit and 64-bit length boundaries (counting the prefix byte), and a 1 MiB output chunk.
    const sizes = [0, 1, 124, 125, 126, 65_534, 65_535, 65_536, 1024 * 1024 + 3];
    const chunks = sizes.map((size) => randomBytes(size));
    const client = new WebSocket(url);
    const received: Array<{ binary: boolean; data: Buffer }> = [];
    const done = new Promise<void>((resolve) =>
      client.on('message', (data, isBinary) => {
        received.push({ binary: isBinary, data: data as Buffer });
        if (received.length === chunks.length * 2) resolve();
      }),
    );
    const [serverSide] = (await new Promise((resolve) => server.once('connection', (ws) => resolve([ws])))) as [
      WebSocket,
    ];
    // The fast path writes to the connection itself: ws's send() must not see the binary messages.
    const send = serverSide.send.bind(serverSide);
    let binarySends = 0;
    serverSide.send = ((data: unknown, ...rest: unknown[]) => {
      if (Buffer.isBuffer(data)) binarySends++;
      return (send as (...args: unknown[]) => void)(data, ...rest);
    }) as WebSocket['send'];
    let callbacks = 0;
    chunks.forEach((chunk, i) => {
      sendPrefixedBinary(serverSide, i % 3, chunk, (error) => {
        expect(error ?? null).toBeNull();
        callbacks++;
      });
      serverSide.send(`text ${i}`);
    });
    await done;
    client.close();
    chunks.forEach((chunk, i) => {
      const message = received[i * 2];
      expect(message?.binary).toBe(true);
      expect(message?.data.length).toBe(chunk.length + 1);
      expect(message?.data[0]).toBe(i % 3);
      expect(message?.data.subarray(1).equals(chunk)).toBe(true);
      expect(received[i * 2 + 1]).toEqual({ binary: false, data: Buffer.from(`text ${i}`) });
    });
    expect(callbacks).toBe(chunks.length);
    expect(binarySends).toBe(0);
  });

  it('sends a list of chunks as one message, their bytes in order (an empty list: the prefix alone)', async () => {
    const lists = [
      [],
      [Buffer.alloc(0)],
      [randomBytes(100), Buffer.alloc(0), randomBytes(65_536), randomBytes(70_000)],
    ];
    const client = new WebSocket(url);
    const received: Buffer[] = [];
    const done = new Promise<void>((resolve) =>
      client.on('message', (data) => {
        received.push(data as Buffer);
        if (received.length === lists.length) resolve();
      }),
    );
    const [serverSide] = (await new Promise((resolve) => server.once('connection', (ws) => resolve([ws])))) as [
      WebSocket,
    ];
    let callbacks = 0;
    lists.forEach((list, i) => {
      sendPrefixedBinary(serverSide, i + 1, list, (error) => {
        expect(error ?? null).toBeNull();
        callbacks++;
      });
    });
    await done;
    client.close();
    expect(received.map((data) => data.toString('hex'))).toEqual(
      lists.map((list, i) => Buffer.concat([Buffer.from([i + 1]), ...list]).toString('hex')),
    );
    expect(callbacks).toBe(lists.length);
  });

  it('falls back to send() with the prefix prepended when the ws internals are not as expected', () => {
    const sent: Buffer[] = [];
    const fake = {
      send: (data: Buffer, _options: unknown, callback: () => void) => {
        sent.push(data);
        callback();
      },
    } as unknown as WebSocket;
    let called = false;
    sendPrefixedBinary(fake, 2, Buffer.from('abc'), () => {
      called = true;
    });
    sendPrefixedBinary(fake, 1, [Buffer.from('d'), Buffer.from('ef')], () => undefined);
    expect(sent).toEqual([Buffer.from([2, 0x61, 0x62, 0x63]), Buffer.from([1, 0x64, 0x65, 0x66])]);
    expect(called).toBe(true);
  });
});
