import type {
  CreateSandboxRequest,
  ResetSandboxRequest,
  Sandbox as SandboxInfo,
  SandboxInspection,
  SandboxState,
  SyncRequest,
  SyncResult,
  UpdateSandboxRequest,
} from '@burrow/contract';
import { syncSandbox } from './buckets.js';
import { Commands, Pty } from './commands.js';
import { type ConnectionOptions, splitConnection } from './connection-config.js';
import {
  ForkSandboxResponseParser,
  SandboxInspectionParser,
  SandboxListParser,
  SandboxParser,
} from './contract-wire.js';
import { Files } from './files.js';
import { HttpClient } from './http-client.js';
import { Network } from './network.js';
import { Ports } from './ports.js';
import { Snapshots } from './snapshots.js';

/** Options of {@link Sandbox.create}: the create request plus how to connect. */
export type CreateSandboxOptions = CreateSandboxRequest & ConnectionOptions;

/** Options of {@link Sandbox.list} and {@link Sandbox.listAll}. */
export interface ListSandboxesOptions extends ConnectionOptions {
  /** Only sandboxes in this state. @default every state but `deleted` */
  state?: SandboxState | undefined;
  /** Only sandboxes carrying all these labels. */
  labels?: Record<string, string> | undefined;
  /** Page size, 1–200. @default 50 */
  limit?: number | undefined;
  /** `nextCursor` of the previous page. */
  cursor?: string | undefined;
}

/** One page of {@link Sandbox.list}. */
export interface SandboxPage {
  items: Sandbox[];
  /** Pass it as `cursor` for the next page; null on the last page. */
  nextCursor: string | null;
}

/**
 * A handle on one sandbox: its record ({@link Sandbox.info}) and its capabilities
 * ({@link Sandbox.commands}, {@link Sandbox.files}).
 *
 * Connection: `apiUrl` defaults to `BURROW_URL` (else `http://127.0.0.1:7420`), `apiKey` to `BURROW_API_KEY`.
 *
 * @example
 * ```ts
 * import { Sandbox } from '@burrow/sdk';
 *
 * const sandbox = await Sandbox.create({ template: 'base', labels: { agent: 'demo' } });
 * try {
 *   const result = await sandbox.commands.run('echo hello');
 *   console.log(result.stdout);
 * } finally {
 *   await sandbox.delete();
 * }
 * ```
 */
export class Sandbox {
  /** The sandbox id (`sbx_` + 20 characters). */
  readonly id: string;
  /** Runs commands in the sandbox. */
  readonly commands: Commands;
  /** Reads and writes the sandbox's files. */
  readonly files: Files;
  /** Interactive terminals (PTYs) in the sandbox. */
  readonly pty: Pty;
  /** Named and unnamed snapshots of the sandbox. */
  readonly snapshots: Snapshots;
  /** The sandbox's network policy (`sandbox.network.update({ allowOut, denyOut })`). */
  readonly network: Network;
  /** Preview URLs of the sandbox's ports and the ports listening inside (`sandbox.ports.url(8000)`). */
  readonly ports: Ports;
  readonly #http: HttpClient;
  #info: SandboxInfo;

  private constructor(http: HttpClient, info: SandboxInfo) {
    this.#http = http;
    this.#info = info;
    this.id = info.id;
    this.commands = new Commands(http, info.id);
    this.files = new Files(http, info.id);
    this.pty = new Pty(http, info.id, this.commands);
    this.snapshots = new Snapshots(http, info.id);
    this.network = new Network(http, info.id, (updated) => {
      this.#info = updated;
    });
    this.ports = new Ports(http, info.id);
  }

  /**
   * Copy a sandbox directory to (`up`), from (`down`) or both ways with a prefix of one of the tenant's named
   * buckets, through the server (the credentials never enter the sandbox). `both` moves each side's changes since
   * the last sync; a file changed on both sides goes newest-wins and the older copy is kept on both sides as
   * `NAME.conflict-<UTC time>`.
   * @param request `path` (absolute, in the sandbox), `bucket` (a name from `client.buckets`), `prefix`
   *   (default ''), `direction`, `delete` (also remove files gone from the sending side; default false)
   * @returns what moved, in which direction, the conflicts and the skipped symlinks and special files
   * @throws `BurrowError` with code `bucket_not_found`, `bucket_denied`, `bucket_missing`, `bucket_unavailable`,
   *   `bucket_checksum_mismatch`, `invalid_path`
   * @example
   * ```ts
   * const { uploaded } = await sandbox.sync({ path: '/root/out', bucket: 'art', prefix: 'run-1', direction: 'up' });
   * ```
   */
  async sync(request: SyncRequest): Promise<SyncResult> {
    return syncSandbox(this.#http, this.id, request);
  }

  /**
   * Resumes a paused sandbox by id: same id, its processes continuing where they were.
   * @returns a handle on the running sandbox.
   * @throws `SandboxNotFoundError`; `SandboxNotRunningError` when it is neither paused nor running;
   * `CheckpointRejectedError` when its saved state fails verification (it stays paused).
   * @example
   * ```ts
   * const sandbox = await Sandbox.resume('sbx_0123456789abcdefghjk');
   * ```
   */
  static async resume(id: string, options: ConnectionOptions = {}): Promise<Sandbox> {
    const http = new HttpClient(options);
    const info = await http.json(SandboxParser, 'POST', `/sandboxes/${encodeURIComponent(id)}/resume`);
    return new Sandbox(http, info);
  }

  /**
   * Pauses the sandbox: processes and memory are checkpointed with its disk and its CPU and RAM released.
   * An exec or files call resumes it (unless it was created with `autoResume: false`).
   * @returns the updated record (`state: 'paused'`).
   * @throws `SandboxNotRunningError` when it does not run; `ServerError` when the checkpoint fails (it keeps running).
   * @example
   * ```ts
   * await sandbox.pause();
   * ```
   */
  async pause(): Promise<SandboxInfo> {
    return this.#verb('pause');
  }

  /**
   * Resumes the paused sandbox under the same id.
   * @throws `CheckpointRejectedError` when its saved state fails verification (it stays paused).
   * @example
   * ```ts
   * await sandbox.resume();
   * ```
   */
  async resume(): Promise<SandboxInfo> {
    return this.#verb('resume');
  }

  /**
   * Stops the sandbox: every process ends, the disk stays. {@link Sandbox.start} boots it fresh on the same disk.
   * @example
   * ```ts
   * await sandbox.stop();
   * ```
   */
  async stop(): Promise<SandboxInfo> {
    return this.#verb('stop');
  }

  /**
   * Starts a stopped sandbox fresh on its disk (a paused one resumes). A sandbox in `error` because its runtime ended
   * (condition `RuntimeExited`) starts again the same way, with its files.
   * @example
   * ```ts
   * await sandbox.start();
   * ```
   */
  async start(): Promise<SandboxInfo> {
    return this.#verb('start');
  }

  /**
   * Forks the sandbox into `count` new running sandboxes, each with its own copy of the disk and the memory at the
   * fork point, its own id and hostname, and fresh kernel randomness. A running parent is held still only for the
   * checkpoint. User-space state (a seeded PRNG inside a process) is copied as it is.
   * @param options - `count`: 1–20, default 1. `volumes`: what each child gets of the parent's read-write volume
   * mounts: `'fork'` (default) a copy of its own, `'share-readonly'` the same volume read-only, `'refuse'` an error.
   * @returns handles on the children.
   * @example
   * ```ts
   * const [a, b] = await sandbox.fork({ count: 2 });
   * ```
   */
  async fork(options: { count?: number; volumes?: 'fork' | 'share-readonly' | 'refuse' } = {}): Promise<Sandbox[]> {
    const response = await this.#http.json(
      ForkSandboxResponseParser,
      'POST',
      `/sandboxes/${encodeURIComponent(this.id)}/fork`,
      { json: { count: options.count ?? 1, ...(options.volumes === undefined ? {} : { volumes: options.volumes }) } },
    );
    return response.items.map((info) => new Sandbox(this.#http, info));
  }

  /**
   * Sets the TTL to `timeoutMs` from now (it may shorten it: this call names it); other policies stay.
   * @returns the updated record, with `timeoutAt`, `expiresAt` and `expiry`.
   * @throws `SandboxNotFoundError`; `InvalidRequestError` outside 1 s to 30 days.
   * @example
   * ```ts
   * await sandbox.setTimeout(30 * 60_000);
   * ```
   */
  async setTimeout(timeoutMs: number | null): Promise<SandboxInfo> {
    return this.updatePolicies({ timeoutMs });
  }

  /**
   * Changes lifecycle policies (`timeoutMs`, `timeoutAction`, `idleTimeoutMs`, `maxAgeMs`, `pausedRetentionMs`,
   * `snapshotKeepLast`); fields left out stay as they are.
   * @returns the updated record.
   * @throws `SandboxNotFoundError`; `InvalidRequestError` for a bad value.
   * @example
   * ```ts
   * await sandbox.updatePolicies({ idleTimeoutMs: 5 * 60_000, pausedRetentionMs: 24 * 3_600_000 });
   * ```
   */
  async updatePolicies(policies: UpdateSandboxRequest): Promise<SandboxInfo> {
    this.#info = await this.#http.json(SandboxParser, 'PATCH', `/sandboxes/${encodeURIComponent(this.id)}`, {
      json: policies,
    });
    return this.#info;
  }

  /**
   * Replace the sandbox's default environment (`PATCH /v1/sandboxes/{id}` with `env`): commands started afterwards
   * and fork children made afterwards get it; running processes keep theirs. A name left out is removed.
   * @returns the updated record.
   * @throws `SandboxNotFoundError`; `InvalidRequestError` for a bad name or value (as on create).
   * @example
   * ```ts
   * await sandbox.setEnv({ API_TOKEN: rotatedToken });
   * ```
   */
  async setEnv(env: Record<string, string>): Promise<SandboxInfo> {
    return this.updatePolicies({ env });
  }

  /**
   * Counts the sandbox as active now (and for `durationMs` more: a lease against the idle policy) and pushes its
   * TTL to now + `timeoutMs` unless `extendTimeout: false`. Never shortens anything; does not resume a paused one.
   * @returns the updated record.
   * @example
   * ```ts
   * await sandbox.keepalive({ durationMs: 60_000 });
   * ```
   */
  async keepalive(options: { durationMs?: number; extendTimeout?: boolean } = {}): Promise<SandboxInfo> {
    this.#info = await this.#http.json(SandboxParser, 'POST', `/sandboxes/${encodeURIComponent(this.id)}/keepalive`, {
      json: options,
    });
    return this.#info;
  }

  /**
   * Resets the sandbox under the same id, hostname and labels: to a fresh disk and boot of its template, or to a
   * named snapshot (its processes and memory too unless `memory: false`). Everything written since is discarded.
   * @throws `SnapshotNotFoundError`; `SandboxQuarantinedError` for a non-admin key on a quarantined sandbox;
   * `CheckpointRejectedError`; `ServerError` (the sandbox is then `error`: reset again or delete it).
   * @example
   * ```ts
   * await sandbox.reset({ to: 'template' });
   * await sandbox.reset({ to: 'snapshot', snapshot: 'clean-checkout' });
   * ```
   */
  async reset(request: ResetSandboxRequest = { to: 'template' }): Promise<SandboxInfo> {
    this.#info = await this.#http.json(SandboxParser, 'POST', `/sandboxes/${encodeURIComponent(this.id)}/reset`, {
      json: request,
    });
    return this.#info;
  }

  /**
   * Quarantines the sandbox: exec, file writes, commands, fork, reset and delete then need an admin key, and
   * policies (TTL, idle pause) leave it alone; reads, inspect, pause, stop and snapshots still work.
   * @param options - `reason`, shown in info (default `quarantined for inspection`).
   * @example
   * ```ts
   * await sandbox.quarantine({ reason: 'agent tried to reach the metadata service' });
   * ```
   */
  async quarantine(options: { reason?: string | undefined } = {}): Promise<SandboxInfo> {
    this.#info = await this.#http.json(SandboxParser, 'POST', `/sandboxes/${encodeURIComponent(this.id)}/quarantine`, {
      json: options.reason === undefined ? {} : { reason: options.reason },
    });
    return this.#info;
  }

  /**
   * Releases the sandbox from quarantine. Needs an admin key.
   * @throws `PermissionDeniedError` for a non-admin key.
   */
  async release(): Promise<SandboxInfo> {
    this.#info = await this.#http.json(
      SandboxParser,
      'POST',
      `/sandboxes/${encodeURIComponent(this.id)}/quarantine/release`,
    );
    return this.#info;
  }

  /**
   * Disk used by directory and files changed since the template (added, modified, deleted), read without changing
   * the sandbox; works on running, paused and stopped sandboxes.
   * @param options - `limit`: most changes listed (default 1000, max 10000); `depth`: directory levels (default 2).
   * @example
   * ```ts
   * const { disk, changes } = await sandbox.inspect();
   * ```
   */
  async inspect(options: { limit?: number | undefined; depth?: number | undefined } = {}): Promise<SandboxInspection> {
    return this.#http.json(SandboxInspectionParser, 'GET', `/sandboxes/${encodeURIComponent(this.id)}/inspect`, {
      query: { limit: options.limit, depth: options.depth },
    });
  }

  async #verb(verb: 'pause' | 'resume' | 'stop' | 'start'): Promise<SandboxInfo> {
    this.#info = await this.#http.json(SandboxParser, 'POST', `/sandboxes/${encodeURIComponent(this.id)}/${verb}`);
    return this.#info;
  }

  /** The sandbox record as last fetched (state, resources, labels, `expiresAt`, …). {@link Sandbox.refresh} updates it. */
  get info(): SandboxInfo {
    return this.#info;
  }

  /**
   * Creates a sandbox and waits until it runs.
   * @param options - the create request (`template` default `'base'`, `cpuCount`, `memoryMiB`, `diskMiB`, `env`,
   * `cwd`, `labels`, `timeoutMs` running-time TTL, `null` for none; each policy left out takes the server default, built in: no TTL,
   * pause after 15 minutes idle) and connection options.
   * @returns a handle on the running sandbox.
   * @throws `TemplateNotFoundError` for an unknown template; `InvalidRequestError` for bad limits or labels;
   * `AuthenticationError`; `ServerError` when the runtime fails; `ConnectionError` when the server cannot be reached.
   * @example
   * ```ts
   * const sandbox = await Sandbox.create({ memoryMiB: 1024, timeoutMs: 600_000 });
   * ```
   */
  static async create(options: CreateSandboxOptions = {}): Promise<Sandbox> {
    const { connection, rest } = splitConnection(options);
    const http = new HttpClient(connection);
    const info = await http.json(SandboxParser, 'POST', '/sandboxes', { json: rest });
    return new Sandbox(http, info);
  }

  /**
   * Gets a handle on an existing sandbox.
   * @throws `SandboxNotFoundError` when no sandbox with this id exists for the key's tenant.
   * @example
   * ```ts
   * const sandbox = await Sandbox.get('sbx_0123456789abcdefghjk');
   * ```
   */
  static async get(id: string, options: ConnectionOptions = {}): Promise<Sandbox> {
    const http = new HttpClient(options);
    const info = await http.json(SandboxParser, 'GET', `/sandboxes/${encodeURIComponent(id)}`);
    return new Sandbox(http, info);
  }

  /**
   * Lists one page of sandboxes, newest first, filtered by state and labels.
   * @returns the page and the cursor of the next one.
   * @throws `InvalidRequestError` for a bad filter or cursor.
   * @example
   * ```ts
   * const { items, nextCursor } = await Sandbox.list({ labels: { agent: 'demo' }, limit: 20 });
   * ```
   */
  static async list(options: ListSandboxesOptions = {}): Promise<SandboxPage> {
    const { connection, rest } = splitConnection(options);
    const http = new HttpClient(connection);
    const page = await http.json(SandboxListParser, 'GET', '/sandboxes', {
      query: {
        state: rest.state,
        label: Object.entries(rest.labels ?? {}).map(([key, value]) => `${key}=${value}`),
        limit: rest.limit,
        cursor: rest.cursor,
      },
    });
    return { items: page.items.map((info) => new Sandbox(http, info)), nextCursor: page.nextCursor };
  }

  /**
   * Iterates over every matching sandbox, fetching page after page (`limit` is the page size).
   * @throws as {@link Sandbox.list}.
   * @example
   * ```ts
   * for await (const sandbox of Sandbox.listAll({ state: 'running' })) console.log(sandbox.id);
   * ```
   */
  static async *listAll(options: ListSandboxesOptions = {}): AsyncGenerator<Sandbox, void, undefined> {
    let cursor = options.cursor;
    do {
      const page = await Sandbox.list({ ...options, cursor });
      yield* page.items;
      cursor = page.nextCursor ?? undefined;
    } while (cursor !== undefined);
  }

  /**
   * Fetches the sandbox record again and stores it in {@link Sandbox.info}.
   * @returns the fresh record.
   * @throws `SandboxNotFoundError` when the sandbox is gone.
   * @example
   * ```ts
   * const { state } = await sandbox.refresh();
   * ```
   */
  async refresh(): Promise<SandboxInfo> {
    this.#info = await this.#http.json(SandboxParser, 'GET', `/sandboxes/${encodeURIComponent(this.id)}`);
    return this.#info;
  }

  /**
   * Deletes the sandbox with every byte and host resource it holds.
   * @throws `SandboxNotFoundError` when it is already gone.
   * @example
   * ```ts
   * await sandbox.delete();
   * ```
   */
  async delete(): Promise<void> {
    await this.#http.empty('DELETE', `/sandboxes/${encodeURIComponent(this.id)}`);
  }
}
