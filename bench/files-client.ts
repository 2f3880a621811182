/**
 * The client side of the files bench in its own process (forked by files-bench.ts), as an agent's SDK would be:
 * the server and the client then each have their own event loop, instead of sharing the bench's one JS thread.
 * Messages in: {@link ClientRequest}; out: {@link ClientReply} (the transfer's own duration, in ms).
 */
import { Sandbox } from '@burrow/sdk';

/** One transfer to time. */
export type ClientRequest =
  | { op: 'upload'; remotePath: string; localPath: string }
  | { op: 'download'; remotePath: string; localPath: string };

/** The duration of one transfer in ms, or why it failed. */
export type ClientReply = { ok: true; durationMs: number } | { ok: false; message: string };

const [apiUrl, apiKey, sandboxId] = process.argv.slice(2);
if (apiUrl === undefined || apiKey === undefined || sandboxId === undefined || process.send === undefined) {
  throw new Error('usage: forked by files-bench.ts with apiUrl, apiKey and sandboxId');
}
const sandbox = await Sandbox.get(sandboxId, { apiUrl, apiKey });
const reply = (message: ClientReply) => process.send?.(message);

process.on('message', async (request: ClientRequest) => {
  const start = performance.now();
  try {
    if (request.op === 'upload') await sandbox.files.writeFromFile(request.remotePath, request.localPath);
    else await sandbox.files.readToFile(request.remotePath, request.localPath);
    reply({ ok: true, durationMs: performance.now() - start });
  } catch (err) {
    reply({ ok: false, message: err instanceof Error ? err.message : String(err) });
  }
});
process.on('disconnect', () => process.exit(0));
reply({ ok: true, durationMs: 0 });
