import type { CommandService } from '../commands/command-service.js';
import type { ExecService } from './exec-service.js';
import type { FileService } from './file-service.js';
import type { KeyService } from './key-service.js';
import type { SandboxService } from './sandbox-service.js';
import type { TemplateService } from './template-service.js';

/** Every service the HTTP layer calls. */
export interface Services {
  keys: KeyService;
  sandboxes: SandboxService;
  exec: ExecService;
  commands: CommandService;
  files: FileService;
  templates: TemplateService;
  /** Name of the runtime driver, for `/v1/health`. */
  driverName: string;
}
