export { DeletedFileOpenError, HostSocketOpenError } from './checkpoint-blockers.js';
export { type DriverLogger, GvisorDriver, type GvisorDriverOptions } from './gvisor-driver.js';
export { RESTORE_BUFFERED_MAX_BYTES, restoreReadFlags } from './gvisor-restore.js';
export {
  IMAGE_CIPHER_FORMAT,
  type ImageEncryptionInfo,
  type ImageKey,
  imageKey,
  loadImageKey,
} from './image-encryption.js';
export type { GvisorPlatform } from './runsc-cli.js';
export {
  BASE_PACKAGES,
  type BuildTemplateOptions,
  type BuiltTemplate,
  buildTemplate,
  readTemplate,
  removeTemplate,
  TEMPLATE_SUITE,
  type TemplateRecipe,
  templateId,
  templateRecipe,
  templateRef,
} from './template-builder.js';
