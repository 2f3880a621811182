import { z } from 'zod';

/**
 * Wire types of the E2B-compatible surface: the control plane (E2B's REST API) and the in-sandbox daemon "envd"
 * (Connect RPC with the JSON codec). Field names and shapes are E2B's, so its SDKs run unchanged; they are kept
 * apart from Burrow's own contract, whose conventions (units in names, one error envelope) they do not follow.
 * Unknown fields are accepted (E2B's SDKs add fields often); fields Burrow cannot honour are refused by the routes.
 */

/** `metadata` of an E2B sandbox: string pairs, kept as Burrow labels. */
export const E2bMetadataSchema = z.record(z.string(), z.string());

/**
 * `network` of an E2B create request. `allowOut`/`denyOut` become Burrow's egress lists (validated by Burrow's rules);
 * `allowPublicTraffic` and `maskRequestHost` concern ingress, `egressProxy` and `rules` a proxy Burrow does not have:
 * the routes refuse them unless they hold the harmless default. Unknown fields are refused, never ignored.
 */
export const E2bNetworkSchema = z
  .object({
    allowOut: z.array(z.string()).nullable().optional(),
    denyOut: z.array(z.string()).nullable().optional(),
    allowPublicTraffic: z.boolean().nullable().optional(),
    maskRequestHost: z.string().nullable().optional(),
    egressProxy: z.unknown().optional(),
    rules: z.record(z.string(), z.unknown()).nullable().optional(),
  })
  .strict();
export type E2bNetwork = z.infer<typeof E2bNetworkSchema>;

/**
 * Body of `PUT /sandboxes/{id}/network`: replaces the egress rules; a field left out is cleared.
 * `allow_internet_access: false` is `denyOut: ['0.0.0.0/0']`, as in E2B.
 */
export const E2bNetworkUpdateSchema = z
  .object({
    allowOut: z.array(z.string()).nullable().optional(),
    denyOut: z.array(z.string()).nullable().optional(),
    egressProxy: z.unknown().optional(),
    rules: z.record(z.string(), z.unknown()).nullable().optional(),
    allow_internet_access: z.boolean().nullable().optional(),
  })
  .strict();
export type E2bNetworkUpdate = z.infer<typeof E2bNetworkUpdateSchema>;

/** Body of `POST /sandboxes` and `POST /v2/sandboxes`. `timeout` is in seconds. */
export const E2bCreateSandboxSchema = z.object({
  /** Template name, `base`, or a snapshot id. @default 'base' */
  templateID: z.string().min(1).max(128).default('base'),
  /** Seconds until the sandbox ends (or pauses, with `autoPause`). @default 300 (5 minutes) */
  timeout: z.number().int().min(0).max(2_592_000).optional(),
  metadata: E2bMetadataSchema.optional(),
  envVars: z.record(z.string(), z.string()).optional(),
  autoPause: z.boolean().optional(),
  autoPauseMemory: z.boolean().optional(),
  autoResume: z.object({ enabled: z.boolean() }).partial().nullable().optional(),
  secure: z.boolean().optional(),
  allow_internet_access: z.boolean().nullable().optional(),
  network: E2bNetworkSchema.nullable().optional(),
  mcp: z.unknown().optional(),
  iam: z.unknown().optional(),
  volumeMounts: z.array(z.unknown()).nullable().optional(),
});
export type E2bCreateSandbox = z.infer<typeof E2bCreateSandboxSchema>;

/** Body of `POST /sandboxes/{id}/timeout`: seconds from now. */
export const E2bTimeoutSchema = z.object({ timeout: z.number().int().min(0).max(2_592_000) });

/** Body of `POST /sandboxes/{id}/pause`: `memory: false` keeps the filesystem only. */
export const E2bPauseSchema = z.object({ memory: z.boolean().optional() }).nullable().optional();

/** Body of `POST /sandboxes/{id}/connect` (v1 and v2). */
export const E2bConnectSchema = z
  .object({ timeout: z.number().int().min(0).max(2_592_000).optional(), memory: z.boolean().optional() })
  .nullable()
  .optional();

/** Body of `POST /sandboxes/{id}/fork`. */
export const E2bForkSchema = z
  .object({ timeout: z.number().int().min(0).max(2_592_000).optional(), count: z.number().int().min(1).max(16) })
  .partial()
  .nullable()
  .optional();

/** Body of `POST /sandboxes/{id}/snapshots`. */
export const E2bSnapshotSchema = z
  .object({ name: z.string().min(1).max(64).optional() })
  .nullable()
  .optional();

/** Query of `GET /v2/sandboxes` and `GET /sandboxes`. */
export const E2bListQuerySchema = z.object({
  metadata: z.string().max(8192).optional(),
  state: z.union([z.string(), z.array(z.string())]).optional(),
  limit: z.coerce.number().int().min(1).max(1000).optional(),
  nextToken: z.string().max(256).optional(),
  /** ISO-8601: only sandboxes started at or after it. */
  startedAfter: z.string().max(64).optional(),
  template: z.string().max(128).optional(),
  order: z.enum(['asc', 'desc']).optional(),
});

/** Query of `GET /snapshots`. */
export const E2bSnapshotListQuerySchema = z.object({
  sandboxID: z.string().max(128).optional(),
  name: z.string().max(64).optional(),
  limit: z.coerce.number().int().min(1).max(1000).optional(),
  nextToken: z.string().max(256).optional(),
});

/** Query of `GET/POST /files` on envd. Relative paths resolve against the user's home. */
export const E2bFilesQuerySchema = z.object({
  path: z.string().min(1).max(4096).optional(),
  username: z.string().max(64).optional(),
  signature: z.string().max(256).optional(),
  signature_expiration: z.coerce.number().int().optional(),
});

const selector = z.object({ pid: z.number().int().min(0).optional(), tag: z.string().optional() });
const ptySize = z.object({
  size: z.object({ cols: z.number().int().min(1).max(1000), rows: z.number().int().min(1).max(1000) }),
});
const bytes = z.string().max(16 * 1024 * 1024);

/** Request messages of envd's `process.Process` service (proto3 JSON). */
export const E2bProcessRequests = {
  Start: z.object({
    process: z.object({
      cmd: z.string().min(1),
      args: z.array(z.string()).default([]),
      envs: z.record(z.string(), z.string()).default({}),
      cwd: z.string().optional(),
    }),
    pty: ptySize.optional(),
    tag: z.string().optional(),
    stdin: z.boolean().optional(),
  }),
  Connect: z.object({ process: selector }),
  List: z.object({}),
  SendInput: z.object({
    process: selector,
    input: z.object({ stdin: bytes.optional(), pty: bytes.optional() }),
  }),
  SendSignal: z.object({
    process: selector,
    signal: z.union([z.enum(['SIGNAL_UNSPECIFIED', 'SIGNAL_SIGTERM', 'SIGNAL_SIGKILL']), z.number().int()]).optional(),
  }),
  CloseStdin: z.object({ process: selector }),
  Update: z.object({ process: selector, pty: ptySize.optional() }),
} as const;

/** Request messages of envd's `filesystem.Filesystem` service (proto3 JSON). */
export const E2bFilesystemRequests = {
  Stat: z.object({ path: z.string().min(1) }),
  MakeDir: z.object({ path: z.string().min(1) }),
  Move: z.object({ source: z.string().min(1), destination: z.string().min(1) }),
  ListDir: z.object({ path: z.string().min(1), depth: z.number().int().min(0).max(64).optional() }),
  Remove: z.object({ path: z.string().min(1) }),
  WatchDir: z.object({
    path: z.string().min(1),
    recursive: z.boolean().optional(),
    includeEntry: z.boolean().optional(),
  }),
  CreateWatcher: z.object({
    path: z.string().min(1),
    recursive: z.boolean().optional(),
    includeEntry: z.boolean().optional(),
  }),
  GetWatcherEvents: z.object({ watcherId: z.string().min(1) }),
  RemoveWatcher: z.object({ watcherId: z.string().min(1) }),
} as const;
