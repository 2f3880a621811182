import type { ActivityTracker } from '../lifecycle/activity-tracker.js';
import type { CommandService } from './command-service.js';
import type { EventService } from './event-service.js';
import type { ExecService } from './exec-service.js';
import type { FileService } from './file-service.js';
import type { HygieneService } from './hygiene-service.js';
import type { KeyService } from './key-service.js';
import type { Metrics } from './metrics.js';
import type { NetworkService } from './network-service.js';
import type { PolicyService } from './policy-service.js';
import type { QuotaService } from './quota-service.js';
import type { SandboxService } from './sandbox-service.js';
import type { TemplateService } from './template-service.js';
import type { TenantDefaultsService } from './tenant-defaults-service.js';
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
  /** Volumes, their snapshots and forks. */
  volumes: VolumeService;
  /** Name of the runtime driver, for `/v1/health`. */
  driverName: string;
}
