/**
 * `@burrow/contract/wire`: what a client needs at run time without loading zod: the error codes, the event types, the exec
 * stream's channels and the precompiled parsers of every response and stream frame ({@link WireParser}).
 */
export { ERROR_HTTP_STATUS, ErrorCode } from './error-codes.js';
export { EVENT_TYPES } from './event-types.js';
export { ExecChannel } from './exec-channel.js';
export {
  EXEC_FRAME_HEADER_BYTES,
  EXEC_FRAME_MAX_PAYLOAD_BYTES,
  EXEC_FRAMES_MEDIA_TYPE,
  ExecFrameChannel,
  ExecFrameReader,
  execFrame,
  execFrameHeader,
} from './exec-frames.js';
export * from './generated/wire-parsers.js';
export { INVALID, type WireParser } from './wire-parser.js';
