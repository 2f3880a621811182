/**
 * `@burrow/contract/wire`: what a client needs at run time without loading zod: the error codes, the event types, the exec
 * stream's channels and the precompiled parsers of every response and stream frame ({@link WireParser}).
 */
export { ERROR_HTTP_STATUS, ErrorCode } from './error-codes.js';
export { EVENT_TYPES } from './event-types.js';
export { ExecChannel } from './exec-channel.js';
export * from './generated/wire-parsers.js';
export { INVALID, type WireParser } from './wire-parser.js';
