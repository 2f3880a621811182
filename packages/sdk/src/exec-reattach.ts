import { AttachStream } from './command-handle.js';
import { SandboxParser } from './contract-wire.js';
import {
  AbortedError,
  AuthenticationError,
  type BurrowError,
  CommandNotFoundError,
  PermissionDeniedError,
  SandboxNotFoundError,
} from './errors.js';
import type { ExecSignal } from './exec-stream.js';
import type { HttpClient } from './http-client.js';

/** How often a reattach looks whether the sandbox runs again, in ms. */
const RUNNING_POLL_MS = 250;
/** Failed attaches in a row, each while the sandbox ran and without new output, before a reattach gives up. */
const MAX_FRUITLESS_ATTACHES = 10;

/** Where a {@link Reattachment} delivers the command's output and its end. */
export interface ReattachSink {
  output(type: 'stdout' | 'stderr', data: Uint8Array): void;
  exit(exit: { exitCode: number | null; signal: string | null; timedOut: boolean }): void;
  failed(error: BurrowError): void;
}

/**
 * Follows a streamed command that a pause, fork or memory snapshot detached from its exec stream (the `paused`
 * frame): waits until the sandbox runs again (it never resumes it itself: a paused sandbox stays paused until
 * someone resumes it, or a call that auto-resumes it is made), then attaches to the command from the offset the
 * stream reached, so the output goes on with no byte lost or repeated. A later pause, a server restart or a dropped
 * connection only makes it attach again from the last offset. Input sent meanwhile is queued.
 * @internal used by `ExecStream`
 */
export class Reattachment {
  #offset: number;
  #stream: AttachStream | undefined;
  readonly #queued: Array<(stream: AttachStream) => void> = [];
  #closed = false;
  readonly #base: string;

  constructor(
    private readonly http: HttpClient,
    private readonly sandboxId: string,
    commandId: string,
    offset: number,
    private readonly sink: ReattachSink,
  ) {
    this.#offset = offset;
    this.#base = `/sandboxes/${encodeURIComponent(sandboxId)}/commands/${encodeURIComponent(commandId)}`;
    void this.#run();
  }

  writeStdin(data: Uint8Array): void {
    this.#input((stream) => stream.writeStdin(data));
  }

  closeStdin(): void {
    this.#input((stream) => stream.closeStdin());
  }

  kill(signal: ExecSignal): void {
    this.#input((stream) => stream.kill(signal));
  }

  /** Stops following; the command keeps running. */
  close(): void {
    this.#closed = true;
    this.#stream?.close();
  }

  #input(send: (stream: AttachStream) => void): void {
    if (this.#stream !== undefined) send(this.#stream);
    else this.#queued.push(send);
  }

  async #run(): Promise<void> {
    let fruitless = 0;
    while (!this.#closed) {
      try {
        await this.#untilRunning();
      } catch (error) {
        if (!this.#closed) this.sink.failed(error as BurrowError);
        return;
      }
      if (this.#closed) return;
      const stream = new AttachStream(this.http, this.#base, { offset: this.#offset });
      this.#stream = stream;
      for (const send of this.#queued.splice(0)) send(stream);
      const before = this.#offset;
      try {
        for await (const event of stream) {
          if (event.type === 'stdout' || event.type === 'stderr') {
            this.#offset = event.offset;
            this.sink.output(event.type, event.data);
          } else if (event.type === 'exit') {
            this.sink.exit({ exitCode: event.exitCode, signal: event.signal, timedOut: event.timedOut });
            return;
          }
        }
      } catch (error) {
        if (this.#closed) return;
        if (isFinal(error)) {
          this.sink.failed(error as BurrowError);
          return;
        }
        fruitless = this.#offset === before ? fruitless + 1 : 0;
        if (fruitless >= MAX_FRUITLESS_ATTACHES) {
          this.sink.failed(error as BurrowError);
          return;
        }
      } finally {
        this.#stream = undefined;
      }
      await sleep(RUNNING_POLL_MS);
    }
  }

  /** Resolves once the sandbox's state is `running`; a server that does not answer is asked again. */
  async #untilRunning(): Promise<void> {
    const path = `/sandboxes/${encodeURIComponent(this.sandboxId)}`;
    while (!this.#closed) {
      try {
        const sandbox = await this.http.json(SandboxParser, 'GET', path);
        if (sandbox.state === 'running') return;
      } catch (error) {
        if (isFinal(error)) throw error;
      }
      await sleep(RUNNING_POLL_MS);
    }
  }
}

/** Errors that attaching again cannot cure. */
function isFinal(error: unknown): boolean {
  return (
    error instanceof CommandNotFoundError ||
    error instanceof SandboxNotFoundError ||
    error instanceof AuthenticationError ||
    error instanceof PermissionDeniedError ||
    error instanceof AbortedError
  );
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
