export { type AppOptions, buildApp, SERVER_VERSION } from './http/app.js';
export { mapError } from './http/error-mapping.js';
export { DEFAULT_HTTP_LIMITS, type HttpLimits } from './http/http-limits.js';
export type { ZodApp } from './http/zod-app.js';
export { type ReconcileReport, Reconciler } from './lifecycle/reconciler.js';
export { decideSandbox, expiresAtFor, findOrphans } from './lifecycle/ttl-policy.js';
export {
  type Burrow,
  type BurrowDeps,
  type Config,
  type ConfigOverrides,
  createBurrow,
  loadConfig,
  setup,
  startServer,
} from './main.js';
export { type DnsUpstream, hostDnsUpstreams, parseDnsUpstreams } from './node/dns-upstreams.js';
export { GvisorTemplateBuilder } from './node/gvisor-template-builder.js';
export {
  type SandboxDnsPolicy,
  type SandboxResolver,
  type SandboxResolverOptions,
  startSandboxResolver,
} from './node/sandbox-resolver.js';
export type { HostCapacity } from './services/host-capacity.js';
export type { Principal } from './services/key-service.js';
export { S3BlobStore, type S3BlobStoreOptions } from './services/s3-blob-store.js';
export { createS3Client, parseS3Url, type S3Location, type SnapshotStoreConfig } from './services/s3-config.js';
export { SnapshotStoreError } from './services/s3-errors.js';
export type { Services } from './services/services.js';
export type { BuiltTemplateInfo, TemplateBuilder } from './services/template-service.js';
export { parseWarmPool, WarmPool, type WarmPoolReport, type WarmPoolTarget } from './services/warm-pool.js';
export { openStore, type Store } from './store/store.js';
export type { Clock } from './util/clock.js';
