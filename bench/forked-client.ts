/**
 * The bench's end of a client forked into its own process (bench/exec-client.ts, bench/files-client.ts), as an
 * agent's SDK would run: requests go over the IPC channel one at a time, and each reply is the client's own answer.
 * A client says it is ready with one `{ ok: true }` message before its first request.
 */
import { fork } from 'node:child_process';

/** What a forked client answers: its result, or why the request failed. */
export type ForkedClientReply = ({ ok: true } & object) | { ok: false; message: string };

/** A forked client: {@link ForkedClient.call} sends one request and resolves with the client's `ok` reply. */
export interface ForkedClient<Request, Reply extends ForkedClientReply> {
  /** @throws Error with the client's message when it answers `ok: false`, or when it exits first */
  call(request: Request): Promise<Extract<Reply, { ok: true }>>;
  /** Disconnect: the client exits. */
  close(): void;
}

/**
 * Fork `script` (run through tsx) with `args` and wait for its ready message.
 * @param name how errors name the client, e.g. `files client`
 * @throws Error when the client fails or exits before it is ready
 */
export async function startForkedClient<Request, Reply extends ForkedClientReply>(
  script: URL,
  args: string[],
  name: string,
): Promise<ForkedClient<Request, Reply>> {
  const child = fork(script, args, { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const next = () =>
    new Promise<Extract<Reply, { ok: true }>>((resolve, reject) => {
      const onExit = (code: number | null) => reject(new Error(`${name} exited (${code})`));
      child.once('exit', onExit);
      child.once('message', (reply: Reply) => {
        child.off('exit', onExit);
        if (reply.ok) resolve(reply as Extract<Reply, { ok: true }>);
        else reject(new Error(`${name}: ${(reply as { message: string }).message}`));
      });
    });
  await next();
  return {
    call: (request) => {
      const answer = next();
      child.send(request as object);
      return answer;
    },
    close: () => {
      if (child.connected) child.disconnect();
    },
  };
}
