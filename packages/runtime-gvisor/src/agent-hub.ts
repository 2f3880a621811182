import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { constants as osConstants } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Writable } from 'node:stream';
import { finished } from 'node:stream/promises';
import {
  type ProcessExit,
  RuntimeError,
  type SandboxProcess,
  type SupervisedStart,
  type SupervisedStartOptions,
} from '@burrow/runtime';
import { MAX_SOCKET_PATH_BYTES } from './agent-binary.js';

/**
 * Protocols an agent announces in its hello frame: 2 adds background starts ('B'/'b'); 1 is the agent of a sandbox
 * paused or created before that (its image keeps its binary).
 */
const AGENT_PROTOCOLS: ReadonlyMap<string, number> = new Map([
  ['burrow-agent 1', 1],
  ['burrow-agent 2', 2],
]);
/** Largest frame accepted from a sandbox (the agent sends at most 1 MiB of output per frame, its read size). */
const MAX_FRAME_BYTES = 1024 * 1024;
/** How long a start waits for the agent's data connection and first answer, in ms. */
const START_TIMEOUT_MS = 10_000;
/**
 * How long a background start waits for the agent's answer, in ms. The agent answers starts in order, each after
 * two process starts inside the sandbox; 100 at once on a loaded host (load 18 on 2 cores) took over 10 s.
 */
const BACKGROUND_START_TIMEOUT_MS = 120_000;
/** How long a quiesce waits for the agent to drop its host sockets, in ms. */
const QUIESCE_TIMEOUT_MS = 5_000;
/** How long after its exit a command's output that nobody started reading is kept before it is discarded, in ms. */
const UNREAD_OUTPUT_DRAIN_MS = 5_000;
/** Keep the agent's frames flowing while the consumer holds less than this much output, in bytes. */
const OUTPUT_HIGH_WATER_BYTES = 1024 * 1024;

/**
 * The agent could not take a command (it could not open the command's data connection, or all its slots are in
 * use): nothing ran, so the caller may start it another way (the driver falls back to `runsc exec`).
 */
export class AgentStartError extends RuntimeError {}

/** A frame from or to the agent: `[type u8][length u32 BE][payload]`. */
export interface Frame {
  type: string;
  payload: Buffer;
}

/** Options of {@link AgentHub.exec}. */
export interface AgentExecOptions {
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  user?: { uid: number; gid: number } | undefined;
  signal?: AbortSignal | undefined;
}

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
 * Output frames (`O` stdout, `R` stderr): their payload is a plain byte stream, so one of them may be handed over
 * as several frames of the same type, each a piece of its payload, with the same bytes in the same order.
 */
const STREAM_FRAME_TYPES: ReadonlySet<string> = new Set(['O', 'R']);

/**
 * Reads frames from a socket; stops (and reports an error) on a frame above {@link MAX_FRAME_BYTES}. A frame that
 * lies inside one socket read is handed over as a slice of it (no copy). An output frame ({@link STREAM_FRAME_TYPES})
 * larger than what one read holds of it (output frames are up to 1 MiB, socket reads 64 KiB) is handed over as it
 * arrives: each read's piece of it becomes a frame of the same type, a slice of that read (no copy, no allocation;
 * copying 64 KiB reads into a fresh 1 MiB buffer per frame would be the largest item of the server's own CPU while
 * streaming, page faults and external-memory GCs included). Any other frame larger than one read is copied
 * piece by piece, as the reads arrive, into a buffer of exactly its size allocated when its header is read. So every
 * read is released as soon as its consumer lets go of it.
 * While `onFrame` is null the reader only queues what it is given (a connection not claimed yet).
 * @internal exported for its unit test only
 */
export class FrameReader {
  /** Reads not parsed yet: queued while `onFrame` is null. */
  private queued: Buffer[] = [];
  /** A header split between reads (fewer than 5 bytes). */
  private head: Buffer | null = null;
  /**
   * The frame being read: its type, its length, how much of it has arrived, and the buffer it is copied into (null
   * for an output frame, handed over in pieces).
   */
  private partial: { type: string; length: number; filled: number; payload: Buffer | null } | null = null;
  onFrame: ((frame: Frame) => void) | null = null;

  constructor(private readonly onBad: (reason: string) => void) {}

  /** Inside `parse`: a push from a frame's consumer only queues (the rest of the current read comes first). */
  private parsing = false;

  push(chunk: Buffer): void {
    if (chunk.length > 0) this.queued.push(chunk);
    if (this.parsing) return;
    this.parsing = true;
    try {
      while (this.onFrame !== null && this.queued.length > 0) {
        const next = this.queued.shift() as Buffer;
        const rest = this.parse(next);
        if (rest === null) return;
        if (rest.length > 0) this.queued.unshift(rest);
      }
    } finally {
      this.parsing = false;
    }
  }

  /** Parse frames out of `chunk` while there is a consumer; returns what is left unparsed, or null when stopped. */
  private parse(chunk: Buffer): Buffer | null {
    let at = 0;
    while (at < chunk.length && this.onFrame !== null) {
      const partial = this.partial;
      if (partial !== null) {
        const take = Math.min(partial.length - partial.filled, chunk.length - at);
        const complete = partial.filled + take === partial.length;
        if (complete) this.partial = null;
        if (partial.payload === null) {
          partial.filled += take;
          at += take;
          this.onFrame({ type: partial.type, payload: chunk.subarray(at - take, at) });
        } else {
          chunk.copy(partial.payload, partial.filled, at, at + take);
          partial.filled += take;
          at += take;
          if (complete) this.onFrame({ type: partial.type, payload: partial.payload });
        }
        continue;
      }
      let header: Buffer;
      if (this.head !== null || chunk.length - at < 5) {
        const have = this.head ?? Buffer.alloc(0);
        const take = Math.min(5 - have.length, chunk.length - at);
        const joined = Buffer.concat([have, chunk.subarray(at, at + take)]);
        at += take;
        if (joined.length < 5) {
          this.head = joined;
          continue;
        }
        this.head = null;
        header = joined;
      } else {
        header = chunk.subarray(at, at + 5);
        at += 5;
      }
      const type = String.fromCharCode(header[0] ?? 0);
      const length = header.readUInt32BE(1);
      if (length > MAX_FRAME_BYTES) {
        this.onBad(`frame of ${length} bytes`);
        this.queued = [];
        this.partial = null;
        this.head = null;
        return null;
      }
      if (chunk.length - at >= length) {
        const payload = chunk.subarray(at, at + length);
        at += length;
        this.onFrame({ type, payload });
      } else if (STREAM_FRAME_TYPES.has(type)) {
        // The part of it in this read (if any) is handed over on the next turn of the loop.
        this.partial = { type, length, filled: 0, payload: null };
      } else {
        this.partial = { type, length, filled: 0, payload: Buffer.allocUnsafe(length) };
      }
    }
    return chunk.subarray(at);
  }
}

function encodeFrame(type: string, payload: Buffer = Buffer.alloc(0)): Buffer {
  const header = Buffer.alloc(5);
  header.write(type, 0, 'latin1');
  header.writeUInt32BE(payload.length, 1);
  return Buffer.concat([header, payload]);
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
    await Promise.all(
      controls.map(
        (socket) =>
          new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, QUIESCE_TIMEOUT_MS);
            socket.once('close', () => {
              clearTimeout(timer);
              resolve();
            });
            socket.write(encodeFrame('Q'));
          }),
      ),
    );
    for (const socket of endpoint.connections) socket.destroy();
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
    const payload = Buffer.from(`${fields.join('\0')}\0`);
    const spare = takeSpare(endpoint);
    if (spare !== undefined) {
      spare.socket.write(encodeFrame('E', payload));
      // An agent that never answers on it: the connection is ended, and the start fails.
      const timer = setTimeout(() => spare.socket.destroy(), START_TIMEOUT_MS);
      try {
        return await startedProcess(spare.socket, spare.reader, options, () => endpoint.quiesced);
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
    control.write(encodeFrame('E', payload));
    const { socket, reader } = await connected;
    return startedProcess(socket, reader, options, () => endpoint.quiesced);
  }

  /**
   * Start a background command under its in-sandbox supervisor (`burrow-agent --supervise`, a 'B' frame on the
   * control connection; the agent answers 'b' with the pid once the command runs). The supervisor holds no host
   * descriptor, so quiesces leave it and its command running. Null when the connected agent is too old for it.
   * @throws RuntimeError when no answer comes within {@link START_TIMEOUT_MS} or the supervisor could not start
   */
  async startBackground(
    sandboxId: string,
    control: Socket,
    options: SupervisedStartOptions,
  ): Promise<SupervisedStart | null> {
    const endpoint = this.endpoints.get(sandboxId);
    if (!endpoint || endpoint.control !== control || endpoint.protocol < 2) return null;
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
}

/** The oldest open spare data connection of `endpoint`, taken off its list; undefined when there is none. */
function takeSpare(endpoint: AgentEndpoint): { socket: Socket; reader: FrameReader } | undefined {
  for (let spare = endpoint.spares.shift(); spare !== undefined; spare = endpoint.spares.shift()) {
    if (!spare.socket.destroyed && spare.socket.writable) return spare;
  }
  return undefined;
}

/**
 * Wire a data connection into a {@link SandboxProcess} once its first frame ('P' or 'F') arrived. `quiesced` tells
 * whether the agent was quiesced for a checkpoint, which then ended the command.
 */
function startedProcess(
  socket: Socket,
  reader: FrameReader,
  options: AgentExecOptions,
  quiesced: () => boolean,
): Promise<SandboxProcess> {
  const stdout = new PassThrough({ highWaterMark: OUTPUT_HIGH_WATER_BYTES });
  const stderr = new PassThrough({ highWaterMark: OUTPUT_HIGH_WATER_BYTES });
  let settle!: (exit: ProcessExit) => void;
  const exitFrame = new Promise<ProcessExit>((resolve) => {
    settle = resolve;
  });
  let ended = false;
  const end = (exit: ProcessExit): void => {
    if (ended) return;
    ended = true;
    stdout.end();
    stderr.end();
    settle(exit);
  };
  const exited = exitFrame.then(async (exit) => {
    // `exited` waits until both streams were read to their end. A stream nobody reads must not hold it forever,
    // but its output must not be lost either: the exit frame often arrives in the same chunk as the pid, before
    // the caller of exec() attached its 'data' listeners, and resume() without listeners discards data (the lost
    // stdout of the conformance suite). So an unread stream is drained at once only when it holds nothing, and one
    // still unread UNREAD_OUTPUT_DRAIN_MS after the exit is drained then.
    const drainIfUnread = (emptyOnly: boolean): void => {
      for (const stream of [stdout, stderr]) {
        if (stream.readableFlowing === null && (!emptyOnly || stream.readableLength + stream.writableLength === 0))
          stream.resume();
      }
    };
    drainIfUnread(true);
    const timer = setTimeout(() => drainIfUnread(false), UNREAD_OUTPUT_DRAIN_MS);
    await Promise.all([finished(stdout), finished(stderr)]).catch(() => undefined);
    clearTimeout(timer);
    return exit;
  });
  const stdin = new Writable({
    highWaterMark: 256 * 1024,
    write(chunk: Buffer, _encoding, callback) {
      if (ended || socket.destroyed) return callback();
      if (socket.write(encodeFrame('I', chunk))) callback();
      else socket.once('drain', () => callback());
    },
    final(callback) {
      if (!ended && !socket.destroyed) socket.write(encodeFrame('C'));
      callback();
    },
  });
  stdin.on('error', () => undefined);
  const kill = async (signal: NodeJS.Signals): Promise<void> => {
    if (ended || socket.destroyed) return;
    const number = osConstants.signals[signal];
    socket.write(encodeFrame('S', Buffer.from([number])));
  };
  const paused = new Set<PassThrough>();
  const resumeWhenDrained = (stream: PassThrough): void => {
    if (paused.has(stream)) return;
    paused.add(stream);
    socket.pause();
    stream.once('drain', () => {
      paused.delete(stream);
      if (paused.size === 0) socket.resume();
    });
  };
  return new Promise((resolve, reject) => {
    let started = false;
    const process: SandboxProcess = { stdin, stdout, stderr, kill, exited };
    reader.onFrame = (frame) => {
      if (!started) {
        started = true;
        if (frame.type === 'P') {
          resolve(process);
          return;
        }
        if (frame.type === 'F' && frame.payload.length === 5) {
          const stage = frame.payload[0];
          const errno = frame.payload.readUInt32BE(1);
          socket.destroy();
          if (stage === 3) {
            // Like a shell: 127 for a program that is not there, 126 for one that cannot be executed.
            const missing = errno === osConstants.errno.ENOENT || errno === osConstants.errno.ENOTDIR;
            stderr.write(`${options.argv[0]}: ${missing ? 'command not found' : 'permission denied'}\n`);
            end({ exitCode: missing ? 127 : 126, signal: null });
            resolve(process);
          } else if (stage === 1) {
            reject(
              new RuntimeError(`the working directory ${options.cwd} does not exist in the sandbox`, `errno ${errno}`, {
                code: 'invalid_request',
              }),
            );
          } else if (stage === 4) {
            // The agent's own resources (slots, pipes, vfork): nothing ran.
            reject(new AgentStartError(`the exec agent could not start the command (errno ${errno})`));
          } else {
            reject(new RuntimeError(`the exec agent could not start the command (stage ${stage}, errno ${errno})`));
          }
          return;
        }
        socket.destroy();
        reject(new RuntimeError(`unexpected first frame from the exec agent: ${frame.type}`));
        return;
      }
      if (frame.type === 'O') {
        if (!stdout.write(frame.payload)) resumeWhenDrained(stdout);
      } else if (frame.type === 'R') {
        if (!stderr.write(frame.payload)) resumeWhenDrained(stderr);
      } else if (frame.type === 'X' && frame.payload.length === 4) {
        end(decodeWaitStatus(frame.payload.readUInt32BE(0)));
        socket.end();
      } else {
        socket.destroy();
      }
    };
    // Frames that arrived together with (or since) the hello are buffered in the reader.
    reader.push(Buffer.alloc(0));
    socket.on('close', () => {
      if (!started) reject(new RuntimeError('the exec agent closed the connection before the command started'));
      // Closed without an exit status: a checkpoint quiesced the agent (it SIGKILLs its commands) or the agent died.
      end({ exitCode: null, signal: 'SIGKILL', ...(quiesced() ? { reason: 'sandbox_checkpoint' as const } : {}) });
    });
    if (options.signal) {
      const onAbort = (): void => {
        void kill('SIGKILL');
      };
      options.signal.addEventListener('abort', onAbort, { once: true });
      void exited.finally(() => options.signal?.removeEventListener('abort', onAbort));
      if (options.signal.aborted) onAbort();
    }
  });
}

/** Linux wait status: exit code in bits 8–15, terminating signal in bits 0–6. */
export function decodeWaitStatus(status: number): ProcessExit {
  const termSignal = status & 0x7f;
  if (termSignal === 0) return { exitCode: (status >> 8) & 0xff, signal: null };
  const entry = Object.entries(osConstants.signals).find(([, value]) => value === termSignal);
  return { exitCode: null, signal: entry?.[0] ?? `SIG${termSignal}` };
}
