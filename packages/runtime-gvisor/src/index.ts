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
export type { EgressProxyEndpoint } from './network/egress-intercept-rules.js';
export {
  ALWAYS_DENIED_CIDRS,
  GUEST_ADDRESS,
  GUEST_GATEWAY,
  type ResolverEndpoint,
} from './network/network-rules.js';
export {
  DEFAULT_POOL_CIDR,
  DEFAULT_RESOLVER_PORT,
  type SandboxNetworkIdentity,
  SandboxNetworks,
  type SandboxNetworksOptions,
} from './network/sandbox-network.js';
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
export { LoopVolumeHost } from './volume-disks.js';
