import type { IncomingMessage } from 'node:http';
import { PassThrough, type Readable } from 'node:stream';
import { ErrorCode } from '@burrow/contract';
import { IO_CHUNK_BYTES } from '@burrow/runtime';
import { ApiError } from '../util/api-error.js';

/** How a request body must arrive (see {@link guardBody}). */
export interface BodyRules {
  /** Least average rate over each window of {@link windowMs}, bytes/s; 0 checks no rate. */
  minBytesPerSec: number;
  /** Length of one rate window, ms: the time the server waited on the client, not the time it held the body back. */
  windowMs: number;
  /** The whole body must be in within this many ms of the request's start; 0 for no deadline (streamed uploads). */
  deadlineMs: number;
}

/**
 * `payload` (a request body being received) passed through a stream (`body`; `stop` ends the checks) that fails with `request_timeout` (408) when
 * the body arrives slower than `rules` allow, and with `invalid_request` when the client closes the connection
 * before the body's end. The consumer of the returned stream sees that error and answers it; the request itself
 * stays open, so the answer reaches the client (the connection closes after it, see `registerHttpLimits`).
 *
 * Time in which the server holds the body back (the consumer is slower than the client: a slow sandbox disk) does
 * not count against the client: the rate is measured only while `payload` flows.
 */
export function guardBody(payload: IncomingMessage, rules: BodyRules): { body: Readable; stop: () => void } {
  const out = new PassThrough({ highWaterMark: IO_CHUNK_BYTES });
  // The consumer that reads `out` listens for its errors; one that stopped reading (the request was answered
  // early) must not turn a later failure into an uncaught exception.
  out.on('error', () => undefined);
  const startedMs = performance.now();
  let windowStartMs = startedMs;
  let windowBytes = 0;
  let pausedMs = 0;
  let pausedAtMs: number | null = null;
  let done = false;
  const stop = () => {
    if (done) return;
    done = true;
    clearInterval(timer);
  };
  const fail = (error: ApiError) => {
    if (done) return;
    stop();
    payload.unpipe(out);
    out.destroy(error);
  };
  const tickMs = Math.max(10, Math.min(1000, Math.floor(rules.windowMs / 4)));
  const timer = setInterval(() => {
    const now = performance.now();
    if (rules.deadlineMs > 0 && now - startedMs >= rules.deadlineMs) {
      fail(
        new ApiError(ErrorCode.requestTimeout, `the request body did not arrive within ${rules.deadlineMs} ms`, {
          hint: 'send the body at once after the headers; large data goes through the streamed file upload routes',
        }),
      );
      return;
    }
    if (rules.minBytesPerSec <= 0) return;
    const waitedMs = now - windowStartMs - pausedMs - (pausedAtMs === null ? 0 : now - pausedAtMs);
    if (waitedMs < rules.windowMs) return;
    if ((windowBytes * 1000) / waitedMs < rules.minBytesPerSec) {
      fail(
        new ApiError(
          ErrorCode.requestTimeout,
          `the request body arrived at ${Math.round((windowBytes * 1000) / waitedMs)} bytes/s over ${Math.round(waitedMs)} ms, below this server's minimum of ${rules.minBytesPerSec} bytes/s`,
          { hint: 'send the body without pauses; the limit is BURROW_HTTP_MIN_BODY_BYTES_PER_SEC on the server' },
        ),
      );
      return;
    }
    windowStartMs = now;
    windowBytes = 0;
    pausedMs = 0;
    if (pausedAtMs !== null) pausedAtMs = now;
  }, tickMs);
  timer.unref();
  payload.on('data', (chunk: Buffer) => {
    windowBytes += chunk.length;
  });
  payload.on('pause', () => {
    pausedAtMs ??= performance.now();
  });
  payload.on('resume', () => {
    if (pausedAtMs === null) return;
    pausedMs += performance.now() - pausedAtMs;
    pausedAtMs = null;
  });
  payload.once('end', stop);
  payload.once('close', () => {
    if (!payload.complete) {
      fail(
        new ApiError(ErrorCode.invalidRequest, 'the client closed the connection before the end of the request body', {
          hint: 'send the whole body; nothing of a cut-short upload is kept',
        }),
      );
    }
    stop();
  });
  out.once('close', stop);
  payload.pipe(out);
  return { body: out, stop };
}
