import { randomBytes } from 'node:crypto';
import type { Socket } from 'node:net';
import { RuntimeError, type SupervisedStart, type SupervisedStartOptions } from '@burrow/runtime';
import { encodeFrame } from './agent-frames.js';

/**
 * How long a background start waits for the agent's answer, in ms. The agent answers starts in order, each after
 * two process starts inside the sandbox; 100 at once on a loaded host (load 18 on 2 cores) took over 10 s.
 */
const BACKGROUND_START_TIMEOUT_MS = 120_000;

/**
 * Start a background command under its in-sandbox supervisor (`burrow-agent --supervise`, a 'B' frame on the
 * control connection; the agent answers 'b' with the pid once the command runs). The supervisor holds no host
 * descriptor, so quiesces leave it and its command running. The agent speaks protocol 2 or later; `backgrounds`
 * holds the endpoint's starts waiting for their answer, by start id.
 * @throws RuntimeError when no answer comes within {@link BACKGROUND_START_TIMEOUT_MS}, the control connection
 *   closes first, or the supervisor could not start
 */
export async function startSupervised(
  endpoint: { sandboxId: string; backgrounds: Map<string, (answer: string) => void> },
  control: Socket,
  options: SupervisedStartOptions,
): Promise<SupervisedStart> {
  const sandboxId = endpoint.sandboxId;
  const id = randomBytes(8).toString('hex');
  const fields = [
    id,
    options.dir,
    options.cwd,
    options.user === undefined ? '' : String(options.user.uid),
    options.user === undefined ? '' : String(options.user.gid),
    options.timeoutMs === undefined ? '' : String(options.timeoutMs),
    options.pty === undefined ? '' : String(options.pty.cols),
    options.pty === undefined ? '' : String(options.pty.rows),
    String(options.segmentBytes),
    String(options.maxSegments),
    String(options.argv.length),
    ...options.argv,
    ...Object.entries(options.env).map(([key, value]) => `${key}=${value}`),
  ];
  if (fields.some((field) => field.includes('\0'))) {
    throw new RuntimeError('argv, env, cwd may not contain NUL bytes', undefined, { code: 'invalid_request' });
  }
  const answer = await new Promise<string>((resolve, reject) => {
    const fail = (reason: string): void => {
      endpoint.backgrounds.delete(id);
      control.off('close', onClose);
      reject(new RuntimeError(`the exec agent of ${sandboxId} ${reason}; list the commands to see whether it runs`));
    };
    const timer = setTimeout(
      () => fail(`did not answer a background start within ${BACKGROUND_START_TIMEOUT_MS} ms`),
      BACKGROUND_START_TIMEOUT_MS,
    );
    const onClose = (): void => {
      clearTimeout(timer);
      fail('closed its connection before it answered a background start');
    };
    control.once('close', onClose);
    endpoint.backgrounds.set(id, (text) => {
      clearTimeout(timer);
      control.off('close', onClose);
      endpoint.backgrounds.delete(id);
      resolve(text);
    });
    control.write(encodeFrame('B', Buffer.from(`${fields.join('\0')}\0`)));
  });
  const started = /^P (\d+) (\d+) (\d+)$/.exec(answer);
  if (started !== null)
    return { pid: Number(started[1]), supervisorPid: Number(started[2]), startedAtMs: Number(started[3]) };
  throw new RuntimeError(`the command supervisor did not start (${answer.slice(0, 40)})`);
}
