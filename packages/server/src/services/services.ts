import type { ActivityTracker } from '../lifecycle/activity-tracker.js';
import type { AuditService } from './audit-service.js';
import type { BucketService } from './bucket-service.js';
import type { CommandService } from './command-service.js';
import type { EventService } from './event-service.js';
import type { ExecService } from './exec-service.js';
import type { FileService } from './file-service.js';
import type { HygieneService } from './hygiene-service.js';
import type { KeyService } from './key-service.js';
import type { Metrics } from './metrics.js';
import type { MetricsSampler } from './metrics-sampler.js';
import type { NetworkService } from './network-service.js';
import type { PolicyService } from './policy-service.js';
import type { PortService } from './port-service.js';
import type { QuotaService } from './quota-service.js';
import type { SandboxService } from './sandbox-service.js';
import type { SecretService } from './secret-service.js';
import type { SyncService } from './sync-service.js';
import type { TemplateService } from './template-service.js';
import type { TenantDefaultsService } from './tenant-defaults-service.js';
import type { UsageService } from './usage-service.js';
import type { VolumeService } from './volume-service.js';

/** Every service the HTTP layer calls. */
export interface Services {
  keys: KeyService;
  sandboxes: SandboxService;
  exec: ExecService;
  commands: CommandService;
  files: FileService;
  templates: TemplateService;
  /** Reset, quarantine, inspect. */
  hygiene: HygieneService;
  /** Prometheus metrics behind `GET /metrics` (absent: the route answers `unsupported`). */
  metrics?: Metrics | undefined;
  /** Lifecycle events, their live stream and webhooks. */
  events: EventService;
  /** Policy changes and keepalives. */
  policies: PolicyService;
  /** Tenant quotas. */
  quotas: QuotaService;
  /** Network policy changes. */
  network: NetworkService;
  /** Per-tenant lifecycle policy defaults. @default absent in the OpenAPI writer */
  tenantDefaults?: TenantDefaultsService | undefined;
  /** Activity for the idle policy (streams hold it while open). @default absent in the OpenAPI writer */
  activity?: ActivityTracker | undefined;
  /** The audit log. @default absent in the OpenAPI writer */
  audit?: AuditService | undefined;
  /** Usage metering. @default absent in the OpenAPI writer */
  usage?: UsageService | undefined;
  /** Preview URLs and listening ports of sandboxes. @default absent in the OpenAPI writer */
  ports?: PortService | undefined;
  /** Secrets at egress: set, rotate, list, delete. @default absent in the OpenAPI writer */
  secrets?: SecretService | undefined;
  /** Per-sandbox CPU, memory and disk samples behind `GET /v1/sandboxes/{id}/metrics` (absent: `unsupported`). */
  sampler?: MetricsSampler | undefined;
  /** A tenant's named bucket credentials. @default absent in the OpenAPI writer */
  buckets?: BucketService | undefined;
  /** Artifact sync with those buckets. @default absent in the OpenAPI writer */
  sync?: SyncService | undefined;
  /** Volumes, their snapshots and forks. */
  volumes: VolumeService;
  /** Name of the runtime driver, for `/v1/health`. */
  driverName: string;
}
