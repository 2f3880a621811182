export { DEFAULT_DATA_DIR, discoverApiKey } from './api-key-discovery.js';
export { ExitCode, exitCodeForError, exitCodeForExit, UsageError } from './exit-codes.js';
export { main } from './main.js';
