import type { Socket } from 'node:net';
import { constants as osConstants } from 'node:os';
import { PassThrough, Writable } from 'node:stream';
import { finished } from 'node:stream/promises';
import { type ExecOptions, type ProcessExit, RuntimeError, type SandboxProcess } from '@burrow/runtime';
import { encodeFrame, type FrameReader } from './agent-frames.js';

/**
 * The agent could not take a command (it could not open the command's data connection, or all its slots are in
 * use): nothing ran, so the caller may start it another way (the driver falls back to `runsc exec`).
 */
export class AgentStartError extends RuntimeError {}

/** Options of an exec through the agent. */
export interface AgentExecOptions {
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  user?: { uid: number; gid: number } | undefined;
  signal?: AbortSignal | undefined;
  /** What the command becomes when its connection ends before it did (agent protocol 3; {@link ExecOptions}). */
  detachAs?: ExecOptions['detachAs'];
}

/** How a data connection relates to its endpoint. */
export interface ProcessWiring {
  /** Whether the agent was quiesced for a checkpoint (which ends a command that is not detachable). */
  quiesced: () => boolean;
  /** The endpoint's set of detachable data connections (the connection joins it when `detach` is set). */
  detachable: Set<Socket>;
  /** Set when the command was started detachable ('e'). */
  detach: ExecOptions['detachAs'];
}

/** How long after its exit a command's output that nobody started reading is kept before it is discarded, in ms. */
const UNREAD_OUTPUT_DRAIN_MS = 5_000;
/** Keep the agent's frames flowing while the consumer holds less than this much output, in bytes. */
const OUTPUT_HIGH_WATER_BYTES = 1024 * 1024;

/**
 * Wire a data connection into a {@link SandboxProcess} once its first frame ('P' or 'F') arrived. A connection that
 * closes without an exit status after a quiesce ended a command that is not detachable (a checkpoint ends it); a
 * detachable one goes on in the sandbox, and the process ends as `detached` with the count of output bytes
 * delivered here (the offset to reattach from).
 */
export function startedProcess(
  socket: Socket,
  reader: FrameReader,
  options: AgentExecOptions,
  wiring: ProcessWiring,
): Promise<SandboxProcess> {
  if (wiring.detach !== undefined) {
    wiring.detachable.add(socket);
    socket.once('close', () => wiring.detachable.delete(socket));
  }
  /** Output payload bytes (both streams) received: the offset of the next byte in the command's log. */
  let deliveredBytes = 0;
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
        deliveredBytes += frame.payload.length;
        if (!stdout.write(frame.payload)) resumeWhenDrained(stdout);
      } else if (frame.type === 'R') {
        deliveredBytes += frame.payload.length;
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
      // Closed without an exit status after a quiesce: a detachable command goes on in the sandbox; the agent
      // SIGKILLed any other. Without a quiesce the agent died.
      if (wiring.quiesced() && wiring.detach !== undefined) {
        end({ exitCode: null, signal: null, detached: { commandId: wiring.detach.commandId, offset: deliveredBytes } });
      } else {
        end({
          exitCode: null,
          signal: 'SIGKILL',
          ...(wiring.quiesced() ? { reason: 'sandbox_checkpoint' as const } : {}),
        });
      }
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
