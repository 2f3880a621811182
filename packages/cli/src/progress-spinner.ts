const FRAMES = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
const FRAME_INTERVAL_MS = 80;

/**
 * A one-line spinner with the latest log line, on stderr. On a terminal it redraws in place; elsewhere
 * (pipes, CI) it prints each log line once, prefixed with the title.
 */
export class ProgressSpinner {
  readonly #stream: NodeJS.WritableStream & { isTTY?: boolean; columns?: number };
  readonly #title: string;
  readonly #interactive: boolean;
  #line = '';
  #frame = 0;
  #timer: NodeJS.Timeout | undefined;

  constructor(stream: NodeJS.WritableStream, title: string) {
    this.#stream = stream;
    this.#title = title;
    this.#interactive = (stream as { isTTY?: boolean }).isTTY === true;
  }

  /** Starts drawing. */
  start(): void {
    if (this.#interactive) {
      this.#timer = setInterval(() => this.#draw(), FRAME_INTERVAL_MS);
      this.#timer.unref();
      this.#draw();
    } else {
      this.#stream.write(`${this.#title}…\n`);
    }
  }

  /** Shows a new log line. */
  update(line: string): void {
    this.#line = line;
    if (this.#interactive) this.#draw();
    else this.#stream.write(`  ${line}\n`);
  }

  /** Stops and leaves a final line: `✔ title` or `✖ title`. */
  stop(ok: boolean, detail = ''): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    const mark = ok ? '✔' : '✖';
    if (this.#interactive) this.#stream.write('\r\x1b[2K');
    this.#stream.write(`${mark} ${this.#title}${detail === '' ? '' : ` ${detail}`}\n`);
  }

  #draw(): void {
    this.#frame = (this.#frame + 1) % FRAMES.length;
    const width = Math.max(20, (this.#stream.columns ?? 80) - 1);
    const text = `${FRAMES[this.#frame]} ${this.#title}${this.#line === '' ? '' : `: ${this.#line}`}`;
    this.#stream.write(`\r\x1b[2K${text.slice(0, width)}`);
  }
}
