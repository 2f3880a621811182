import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { RuntimeError, type SandboxProcess, type SupervisedStart, type SupervisedStartOptions } from '@burrow/runtime';
import { MAX_SOCKET_PATH_BYTES } from './agent-binary.js';
import { encodeFrame, FrameReader } from './agent-frames.js';
import { type AgentExecOptions, AgentStartError, startedProcess } from './agent-process.js';
import { startSupervised } from './agent-supervised-start.js';

export type { Frame } from './agent-frames.js';
export { FrameReader } from './agent-frames.js';
export { type AgentExecOptions, AgentStartError, decodeWaitStatus } from './agent-process.js';

/**
 * Protocols an agent announces in its hello frame: 3 adds detachable execs ('e'), 2 background starts ('B'/'b'); 1
 * and 2 are agents of sandboxes paused or created before (an image keeps its binary).
 */
const AGENT_PROTOCOLS: ReadonlyMap<string, number> = new Map([
  ['burrow-agent 1', 1],
  ['burrow-agent 2', 2],
  ['burrow-agent 3', 3],
]);
/** How long a start waits for the agent's data connection and first answer, in ms. */
const START_TIMEOUT_MS = 10_000;
/** How long a quiesce waits for the agent to drop its host sockets, in ms. */
const QUIESCE_TIMEOUT_MS = 5_000;
/** One sandbox's listener and its agent's control connection. */
interface AgentEndpoint {
  sandboxId: string;
  server: Server;
  socketPath: string;
  /** When listening began (ms since the epoch). */
  listenedAtMs: number;
  control: Socket | null;
  /** Protocol version of the connected agent (0 while none is). */
  protocol: number;
  /** Background starts waiting for their 'b' answer, by start id. */
  backgrounds: Map<string, (answer: string) => void>;
  /** Resolvers waiting for the control connection. */
  waiters: Array<(control: Socket | null) => void>;
  /** Data connections announced by the agent, by exec id. */
  pending: Map<string, { claim: (socket: Socket, first: FrameReader) => void; refuse: (reason: string) => void }>;
  /**
   * Spare data connections the agent opened ahead of a command ('W'), oldest first: an exec sends its 'E' on one
   * instead of asking the agent to connect (a connect inside gVisor took ~0.5 ms of the round trip).
   */
  spares: Array<{ socket: Socket; reader: FrameReader }>;
  /** Open data connections, spares included (ended on quiesce). */
  sockets: Set<Socket>;
  /**
   * Data connections of detachable commands ('e'): a quiesce leaves them to end on their own, so the output the
   * agent sent before it detached the command is read to the last byte.
   */
  detachable: Set<Socket>;
  /** Every open connection, identified or not yet (its first frame may still be on its way). */
  connections: Set<Socket>;
  /** Quiesced or closed: a connection accepted from now on is ended at once. */
  closed: boolean;
  /**
   * Quiesced for a checkpoint: a command whose data connection closes without an exit status from now on was ended
   * by it (the agent SIGKILLs every command's group on quiesce).
   */
  quiesced: boolean;
}

/**
 * Host end of the in-sandbox exec agents (`agent/burrow-agent.c`, docs/adr/0003-exec-agent.md). Each running
 * sandbox gets a Unix socket `<sandbox dir>/agent/agent.sock`, visible inside at `/.burrow-agent/agent.sock`
 * (runsc `--host-uds=open`); its agent keeps one control connection and one data connection per command, opened
 * ahead of the command when it can (a spare, docs/exec-protocol.md §4).
 * Everything read from a sandbox is untrusted: frame sizes are bounded and unknown frames end the connection.
 */
export class AgentHub {
  private readonly endpoints = new Map<string, AgentEndpoint>();

  /** Start listening for a sandbox's agent (idempotent). Returns false when the socket path is too long. */
  async listen(sandboxId: string, agentDir: string): Promise<boolean> {
    if (this.endpoints.has(sandboxId)) return true;
    const socketPath = join(agentDir, 'agent.sock');
    if (Buffer.byteLength(socketPath) > MAX_SOCKET_PATH_BYTES) return false;
    await rm(socketPath, { force: true });
    const endpoint: AgentEndpoint = {
      sandboxId,
      server: createServer((socket) => this.accept(endpoint, socket)),
      socketPath,
      listenedAtMs: Date.now(),
      control: null,
      protocol: 0,
      backgrounds: new Map(),
      waiters: [],
      pending: new Map(),
      spares: [],
      sockets: new Set(),
      detachable: new Set(),
      connections: new Set(),
      closed: false,
      quiesced: false,
    };
    this.endpoints.set(sandboxId, endpoint);
    await new Promise<void>((resolve, reject) => {
      endpoint.server.once('error', reject);
      endpoint.server.listen(socketPath, () => {
        endpoint.server.off('error', reject);
        resolve();
      });
    }).catch((error: unknown) => {
      this.endpoints.delete(sandboxId);
      throw error;
    });
    endpoint.server.on('error', () => undefined);
    return true;
  }

  /**
   * Count {@link listeningForMs} from now: the container just started or was restored, and its agent starts
   * connecting only from here (a restore under load can take seconds after the listener opened).
   */
  containerStarted(sandboxId: string): void {
    const endpoint = this.endpoints.get(sandboxId);
    if (endpoint) endpoint.listenedAtMs = Date.now();
  }

  /** How long the sandbox's listener has been open in ms (or since its container started), or null when none. */
  listeningForMs(sandboxId: string): number | null {
    const endpoint = this.endpoints.get(sandboxId);
    return endpoint ? Date.now() - endpoint.listenedAtMs : null;
  }

  /** Spare data connections of the sandbox's agent open now (tests and diagnostics). */
  spareCount(sandboxId: string): number {
    return this.endpoints.get(sandboxId)?.spares.filter((spare) => !spare.socket.destroyed).length ?? 0;
  }

  /** The agent's control connection, waiting at most `waitMs` for it; null when none came. */
  async control(sandboxId: string, waitMs: number): Promise<Socket | null> {
    const endpoint = this.endpoints.get(sandboxId);
    if (!endpoint) return null;
    if (endpoint.control !== null || waitMs <= 0) return endpoint.control;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        endpoint.waiters = endpoint.waiters.filter((waiter) => waiter !== done);
        resolve(endpoint.control);
      }, waitMs);
      const done = (control: Socket | null): void => {
        clearTimeout(timer);
        resolve(control);
      };
      endpoint.waiters.push(done);
    });
  }

  /**
   * Make the agent drop every host socket (it SIGKILLs running commands' groups first) and stop listening, so a
   * checkpoint finds no host socket in the sandbox. Resolves when the agent confirmed or closed, or after a bound.
   */
  async quiesce(sandboxId: string): Promise<void> {
    const endpoint = this.endpoints.get(sandboxId);
    if (!endpoint) return;
    this.endpoints.delete(sandboxId);
    endpoint.closed = true;
    endpoint.quiesced = true;
    endpoint.server.close();
    // Not only the known control connection: one accepted just now whose hello is still on its way is the agent's
    // next control connection, and left open it fails the checkpoint (chaos test, a pause 250 ms after a create).
    // A data connection ignores the frame; the agent ends those itself when its control connection says quiesce.
    const controls = [...endpoint.connections].filter((socket) => !endpoint.sockets.has(socket) && !socket.destroyed);
    const confirmed = await Promise.all(
      controls.map(
        (socket) =>
          new Promise<boolean>((resolve) => {
            const timer = setTimeout(() => resolve(false), QUIESCE_TIMEOUT_MS);
            socket.once('close', () => {
              clearTimeout(timer);
              resolve(true);
            });
            socket.write(encodeFrame('Q'));
          }),
      ),
    );
    // The agent closes its side of every connection before it confirms; a detachable command's connection is read
    // to its end (it ends as detached, with the count of what it delivered).
    const agentClosedAll = confirmed.length > 0 && confirmed.every(Boolean);
    for (const socket of endpoint.connections) {
      if (!agentClosedAll || !endpoint.detachable.has(socket)) socket.destroy();
    }
    for (const waiter of endpoint.waiters) waiter(null);
    await rm(endpoint.socketPath, { force: true });
  }

  /** Stop listening and drop connections without asking the agent (the sandbox is going away). */
  async close(sandboxId: string): Promise<void> {
    const endpoint = this.endpoints.get(sandboxId);
    if (!endpoint) return;
    this.endpoints.delete(sandboxId);
    endpoint.closed = true;
    for (const socket of endpoint.connections) socket.destroy();
    for (const waiter of endpoint.waiters) waiter(null);
    endpoint.server.close();
    await rm(endpoint.socketPath, { force: true });
  }

  /** Stop every listener (driver shutdown). */
  async closeAll(): Promise<void> {
    for (const id of [...this.endpoints.keys()]) await this.close(id);
  }

  private accept(endpoint: AgentEndpoint, socket: Socket): void {
    if (endpoint.closed) {
      socket.destroy();
      return;
    }
    endpoint.connections.add(socket);
    socket.on('close', () => endpoint.connections.delete(socket));
    const reader = new FrameReader(() => socket.destroy());
    const onData = (chunk: Buffer): void => reader.push(chunk);
    socket.on('data', onData);
    socket.on('error', () => undefined);
    reader.onFrame = (frame) => {
      const protocol = frame.type === 'A' ? AGENT_PROTOCOLS.get(frame.payload.toString('latin1')) : undefined;
      if (protocol !== undefined) {
        reader.onFrame = (next) => {
          if (next.type === 'N') {
            // The agent could not connect the command's data connection: refuse at once instead of timing out.
            endpoint.pending.get(next.payload.toString('latin1'))?.refuse('the exec agent could not connect back');
          } else if (next.type === 'b' && protocol >= 2) {
            const text = next.payload.toString('latin1');
            const cut = text.indexOf('\0');
            endpoint.backgrounds.get(text.slice(0, cut))?.(text.slice(cut + 1));
          } else if (next.type !== 'q') {
            socket.destroy();
          }
        };
        endpoint.control?.destroy();
        endpoint.control = socket;
        endpoint.protocol = protocol;
        socket.on('close', () => {
          if (endpoint.control === socket) {
            endpoint.control = null;
            endpoint.protocol = 0;
          }
        });
        for (const waiter of endpoint.waiters.splice(0)) waiter(socket);
        return;
      }
      if (frame.type === 'W') {
        // A spare data connection: kept (its frames buffer in the reader) until an exec takes it.
        const spare = { socket, reader };
        endpoint.spares.push(spare);
        endpoint.sockets.add(socket);
        socket.on('close', () => {
          endpoint.sockets.delete(socket);
          const at = endpoint.spares.indexOf(spare);
          if (at >= 0) endpoint.spares.splice(at, 1);
        });
        reader.onFrame = null;
        return;
      }
      const id = frame.payload.toString('latin1');
      const claim = frame.type === 'H' ? endpoint.pending.get(id)?.claim : undefined;
      if (!claim) {
        socket.destroy();
        return;
      }
      endpoint.pending.delete(id);
      endpoint.sockets.add(socket);
      socket.on('close', () => endpoint.sockets.delete(socket));
      // The reader keeps buffering (its 'data' listener stays) until the process wiring takes the frames.
      reader.onFrame = null;
      claim(socket, reader);
    };
  }

  /**
   * Start a command through the sandbox's agent. Resolves once it runs (its pid is known). A program that is not
   * there resolves as a process that exited with 127 (126 when it cannot be executed), like a shell.
   * @throws RuntimeError when the agent is not connected, the working directory is missing (`invalid_request`)
   * or the user cannot be set
   */
  async exec(sandboxId: string, control: Socket, options: AgentExecOptions): Promise<SandboxProcess> {
    const endpoint = this.endpoints.get(sandboxId);
    if (!endpoint) throw new RuntimeError(`no exec agent listener for ${sandboxId}`);
    const id = randomBytes(8).toString('hex');
    const fields = [
      id,
      options.cwd,
      options.user === undefined ? '' : String(options.user.uid),
      options.user === undefined ? '' : String(options.user.gid),
      String(options.argv.length),
      ...options.argv,
      ...Object.entries(options.env).map(([key, value]) => `${key}=${value}`),
    ];
    if (fields.some((field) => field.includes('\0'))) {
      throw new RuntimeError('argv, env, cwd may not contain NUL bytes', undefined, { code: 'invalid_request' });
    }
    const detach = endpoint.protocol >= 3 ? options.detachAs : undefined;
    const payload =
      detach === undefined
        ? Buffer.from(`${fields.join('\0')}\0`)
        : Buffer.from(`${detach.commandId}\0${detach.segmentBytes}\0${detach.maxSegments}\0${fields.join('\0')}\0`);
    const type = detach === undefined ? 'E' : 'e';
    const wire = { quiesced: () => endpoint.quiesced, detachable: endpoint.detachable, detach };
    const spare = takeSpare(endpoint);
    if (spare !== undefined) {
      spare.socket.write(encodeFrame(type, payload));
      // An agent that never answers on it: the connection is ended, and the start fails.
      const timer = setTimeout(() => spare.socket.destroy(), START_TIMEOUT_MS);
      try {
        return await startedProcess(spare.socket, spare.reader, options, wire);
      } finally {
        clearTimeout(timer);
      }
    }
    const connected = new Promise<{ socket: Socket; reader: FrameReader }>((resolve, reject) => {
      const timer = setTimeout(() => {
        endpoint.pending.delete(id);
        reject(
          new RuntimeError(`the exec agent of ${sandboxId} did not start the command within ${START_TIMEOUT_MS} ms`),
        );
      }, START_TIMEOUT_MS);
      endpoint.pending.set(id, {
        claim: (socket, reader) => {
          clearTimeout(timer);
          resolve({ socket, reader });
        },
        refuse: (reason) => {
          clearTimeout(timer);
          endpoint.pending.delete(id);
          reject(new AgentStartError(`${reason} (${sandboxId})`));
        },
      });
    });
    control.write(encodeFrame(type, payload));
    const { socket, reader } = await connected;
    return startedProcess(socket, reader, options, wire);
  }

  /**
   * Start a background command under its in-sandbox supervisor ({@link startSupervised}). Null when the connected
   * agent is too old for it.
   * @throws RuntimeError when no answer comes in time or the supervisor could not start
   */
  async startBackground(
    sandboxId: string,
    control: Socket,
    options: SupervisedStartOptions,
  ): Promise<SupervisedStart | null> {
    const endpoint = this.endpoints.get(sandboxId);
    if (!endpoint || endpoint.control !== control || endpoint.protocol < 2) return null;
    return startSupervised(endpoint, control, options);
  }
}

/** The oldest open spare data connection of `endpoint`, taken off its list; undefined when there is none. */
function takeSpare(endpoint: AgentEndpoint): { socket: Socket; reader: FrameReader } | undefined {
  for (let spare = endpoint.spares.shift(); spare !== undefined; spare = endpoint.spares.shift()) {
    if (!spare.socket.destroyed && spare.socket.writable) return spare;
  }
  return undefined;
}
