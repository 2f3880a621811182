export * from './commands.js';
export * from './common.js';
export * from './errors.js';
export * from './exec.js';
export * from './files.js';
export * from './keys.js';
export * from './sandbox.js';
export * from './templates.js';
