export type {
  ApiKey,
  BuildTemplateRequest,
  CreateApiKeyRequest,
  CreateSandboxRequest,
  ExitInfo,
  FileInfo,
  Sandbox as SandboxInfo,
  SandboxState,
  Template,
} from '@burrow/contract';
export {
  type BuildTemplateOptions,
  BurrowClient,
  type CreatedApiKey,
  type Health,
  Keys,
  Templates,
} from './burrow-client.js';
export { CommandExitError, type CommandResult, CommandTimeoutError } from './command-result.js';
export { Commands, type RunCommandOptions, type StreamCommandOptions } from './commands.js';
export { type ConnectionOptions, DEFAULT_API_URL } from './connection-config.js';
export {
  AbortedError,
  AuthenticationError,
  BurrowError,
  type BurrowErrorCode,
  type BurrowErrorInit,
  ClientErrorCode,
  ConflictError,
  ConnectionError,
  FileNotFoundError,
  FileSystemError,
  InvalidRequestError,
  KeyNotFoundError,
  PermissionDeniedError,
  ProtocolError,
  RouteNotFoundError,
  SandboxNotFoundError,
  SandboxNotRunningError,
  ServerError,
  TemplateBuildError,
  TemplateNotFoundError,
} from './errors.js';
export { type ExecEvent, type ExecSignal, ExecStream, type ExecStreamOptions } from './exec-stream.js';
export { Files, type ListFilesOptions, type RemoveFileOptions, type WriteFileOptions } from './files.js';
export { type CreateSandboxOptions, type ListSandboxesOptions, Sandbox, type SandboxPage } from './sandbox.js';
