export type {
  ApiKey,
  BuildTemplateRequest,
  CommandInfo,
  CreateApiKeyRequest,
  CreateSandboxRequest,
  Event,
  EventType,
  ExitInfo,
  Expiry,
  FileInfo,
  Quota,
  QuotaLimits,
  Sandbox as SandboxInfo,
  SandboxState,
  Snapshot,
  Template,
  UpdateSandboxRequest,
  Webhook,
} from '@burrow/contract';
export {
  type BuildTemplateOptions,
  BurrowClient,
  type CreatedApiKey,
  type Health,
  Keys,
  Templates,
} from './burrow-client.js';
export { type AttachOptions, AttachStream, type CommandEvent, CommandHandle } from './command-handle.js';
export { CommandExitError, type CommandResult, CommandTimeoutError } from './command-result.js';
export {
  type BackgroundCommandOptions,
  Commands,
  type CreatePtyOptions,
  Pty,
  type RunCommandOptions,
  type StreamCommandOptions,
} from './commands.js';
export { type ConnectionOptions, DEFAULT_API_URL } from './connection-config.js';
export {
  AbortedError,
  AuthenticationError,
  BurrowError,
  type BurrowErrorCode,
  type BurrowErrorInit,
  CheckpointRejectedError,
  ClientErrorCode,
  CommandNotFoundError,
  ConflictError,
  ConnectionError,
  FileNotFoundError,
  FileSystemError,
  InvalidRequestError,
  KeyNotFoundError,
  PermissionDeniedError,
  ProtocolError,
  QuotaExceededError,
  RouteNotFoundError,
  SandboxNotFoundError,
  SandboxNotRunningError,
  SandboxPausedError,
  ServerError,
  SnapshotNotFoundError,
  TemplateBuildError,
  TemplateNotFoundError,
  UnsupportedError,
  UserNotFoundError,
  WebhookNotFoundError,
} from './errors.js';
export { type ExecEvent, type ExecSignal, ExecStream, type ExecStreamOptions } from './exec-stream.js';
export {
  type BatchFile,
  type DownloadOptions,
  type FileData,
  Files,
  type ListFilesOptions,
  type RemoveFileOptions,
  type WatchOptions,
  type WriteFileOptions,
} from './files.js';
export {
  type CreatedWebhook,
  type EventFilter,
  Events,
  type ListEventsOptions,
  Quotas,
  type StreamEventsOptions,
  verifyWebhookSignature,
  Webhooks,
} from './lifecycle.js';
export { type CreateSandboxOptions, type ListSandboxesOptions, Sandbox, type SandboxPage } from './sandbox.js';
export { type CreateSnapshotOptions, Snapshots } from './snapshots.js';
