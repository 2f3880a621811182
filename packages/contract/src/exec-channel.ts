/**
 * Streaming exec over WebSocket at `GET /v1/sandboxes/{id}/exec/stream`.
 *
 * Binary frames carry output and input: the first byte is the channel ({@link ExecChannel}), the rest is raw bytes.
 * Text frames carry JSON control messages: the client sends {@link ExecClientFrame}s (`start` first), the server
 * sends {@link ExecServerFrame}s; `exit` or `error` is always the last frame.
 */
export const ExecChannel = { stdin: 0, stdout: 1, stderr: 2 } as const;
export type ExecChannel = (typeof ExecChannel)[keyof typeof ExecChannel];
