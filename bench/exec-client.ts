/**
 * The client side of the exec bench in its own process (forked by exec-bench.ts), as an agent's SDK would be: the
 * server and the client then each have their own event loop and heap, instead of sharing the bench's one JS thread
 * (in one process the `ws` receiver's copy of every 1 MiB message, its TCP reads and their GC land on the server's
 * thread, which the sandbox waits on through its 208 KiB socket window: ADR 0003, "Streamed output: the socket
 * window and CPU per byte").
 * Messages in: {@link ExecClientRequest}; out: {@link ExecClientReply} (the client's own duration of the call, in ms,
 * so the IPC hop is not counted).
 */
import { Sandbox } from '@burrow/sdk';

/**
 * One call to time: a streamed command whose stdout bytes are counted, a buffered `run` that must exit 0, or the
 * start of a background command (timed until the start answered: it runs, its pid is known).
 */
export type ExecClientRequest =
  | { op: 'stream'; command: string; timeoutMs: number }
  | { op: 'run'; argv: string[] }
  | { op: 'start'; argv: string[] };

/** The duration of one call in ms and the stdout bytes a stream counted (0 for `run`), or why it failed. */
export type ExecClientReply = { ok: true; durationMs: number; stdoutBytes: number } | { ok: false; message: string };

const [apiUrl, apiKey, sandboxId] = process.argv.slice(2);
if (apiUrl === undefined || apiKey === undefined || sandboxId === undefined || process.send === undefined) {
  throw new Error('usage: forked by exec-bench.ts with apiUrl, apiKey and sandboxId');
}
const sandbox = await Sandbox.get(sandboxId, { apiUrl, apiKey });
const reply = (message: ExecClientReply) => process.send?.(message);

process.on('message', async (request: ExecClientRequest) => {
  const start = performance.now();
  try {
    let stdoutBytes = 0;
    if (request.op === 'stream') {
      for await (const event of sandbox.commands.stream(request.command, { timeoutMs: request.timeoutMs })) {
        if (event.type === 'stdout') stdoutBytes += event.data.byteLength;
      }
    } else if (request.op === 'start') {
      const handle = await sandbox.commands.run(request.argv, { background: true });
      if (!(handle.pid > 1)) throw new Error(`background start answered pid ${handle.pid}`);
    } else {
      await sandbox.commands.run(request.argv, { check: true });
    }
    reply({ ok: true, durationMs: performance.now() - start, stdoutBytes });
  } catch (err) {
    reply({ ok: false, message: err instanceof Error ? err.message : String(err) });
  }
});
process.on('disconnect', () => process.exit(0));
reply({ ok: true, durationMs: 0, stdoutBytes: 0 });
