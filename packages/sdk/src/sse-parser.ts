/**
 * Minimal server-sent events parser (the `data:` field only, which is all Burrow sends): feed it text chunks, get
 * each event's data once its blank line arrives. Internal to the SDK.
 */
export class SseParser {
  #buffer = '';
  #data: string[] = [];

  /** Adds a chunk of the stream; returns the data of every event it completed. */
  push(chunk: string): string[] {
    this.#buffer += chunk;
    const events: string[] = [];
    let newline = this.#buffer.search(/\r\n|\r|\n/);
    while (newline !== -1) {
      const line = this.#buffer.slice(0, newline);
      const skip = this.#buffer.startsWith('\r\n', newline) ? 2 : 1;
      // A lone \r at the end of a chunk may be the first half of \r\n: wait for more.
      if (skip === 1 && this.#buffer[newline] === '\r' && newline === this.#buffer.length - 1) break;
      this.#buffer = this.#buffer.slice(newline + skip);
      this.#line(line, events);
      newline = this.#buffer.search(/\r\n|\r|\n/);
    }
    return events;
  }

  /** Ends the stream; returns the last event if it lacked its blank line. */
  end(): string[] {
    const events: string[] = [];
    if (this.#buffer !== '') this.#line(this.#buffer, events);
    this.#buffer = '';
    this.#line('', events);
    return events;
  }

  #line(line: string, events: string[]): void {
    if (line === '') {
      if (this.#data.length > 0) events.push(this.#data.join('\n'));
      this.#data = [];
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.#data.push(value);
  }
}
