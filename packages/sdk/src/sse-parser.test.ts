import { describe, expect, it } from 'vitest';
import { SseParser } from './sse-parser.js';

describe('SseParser', () => {
  it('joins events split anywhere, including inside \\r\\n', () => {
    const parser = new SseParser();
    const text = 'data: {"a":1}\r\n\r\n: comment\ndata: x\ndata: y\n\ndata:z\r\rdata: tail';
    const events: string[] = [];
    for (const char of text) events.push(...parser.push(char));
    events.push(...parser.end());
    expect(events).toEqual(['{"a":1}', 'x\ny', 'z', 'tail']);
  });

  it('ignores other fields and empty events', () => {
    const parser = new SseParser();
    expect(parser.push('event: log\nid: 3\n\nretry: 10\ndata: ok\n\n')).toEqual(['ok']);
  });
});
