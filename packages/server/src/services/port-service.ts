import { connect } from 'node:net';
import {
  DEFAULT_PREVIEW_TTL_MS,
  ErrorCode,
  type ListeningPort,
  type PortList,
  type PortUrl,
  type PortUrlRequest,
  PREVIEW_SIGNATURE_PARAM,
} from '@burrow/contract';
import type { RuntimeDriver } from '@burrow/runtime';
import type { ActivityTracker } from '../lifecycle/activity-tracker.js';
import type { PortStore } from '../store/port-store.js';
import type { SandboxRecord } from '../store/sandbox-store.js';
import { ApiError, sandboxNotFound } from '../util/api-error.js';
import { type Clock, isoNow } from '../util/clock.js';
import type { KeyedMutex } from '../util/keyed-mutex.js';
import type { ExecService } from './exec-service.js';
import type { Principal } from './key-service.js';
import type { PreviewAccess } from './preview-access.js';
import type { PreviewHosts } from './preview-host.js';
import type { SandboxService } from './sandbox-service.js';

/** Dependencies of {@link PortService}. */
export interface PortServiceDeps {
  ports: PortStore;
  sandboxes: SandboxService;
  exec: ExecService;
  driver: RuntimeDriver;
  access: PreviewAccess;
  hosts: PreviewHosts;
  /** The port preview URLs name: the server's own listening port unless the operator set one. */
  serverPort(): number;
  mutex: KeyedMutex;
  clock: Clock;
  activity?: ActivityTracker | undefined;
  /** How long a request to a sandbox it just woke waits for the port to accept, ms. @default 10_000 */
  wakeWaitMs?: number;
}

/** Where a preview request goes: the host address and port that reach the guest's port. */
export interface PreviewUpstream {
  sandboxId: string;
  tenantId: string;
  address: string;
  port: number;
  /** Whether this request resumed the sandbox (or waited for a resume another request began). */
  woke: boolean;
  /**
   * The sandbox row's version: a change means the sandbox may have been paused and resumed since, so connections
   * kept alive to it are dead (a restore resets every connection).
   */
  version: number;
}

/**
 * Ports of sandboxes: preview URLs and who may use them, the listening ports inside, and the preview proxy's
 * lookups (owner, access, wake on request).
 */
export class PortService {
  private readonly waking = new Map<string, Promise<SandboxRecord>>();
  /** Resumes started by preview requests (tests and the bench read it). */
  resumeCount = 0;

  constructor(private readonly deps: PortServiceDeps) {}

  /** The preview host names this server answers. */
  get hosts(): PreviewHosts {
    return this.deps.hosts;
  }

  /** The access token and signatures of preview URLs. */
  get access(): PreviewAccess {
    return this.deps.access;
  }

  /**
   * A preview URL of `port` of sandbox `id`; `public` first makes the port public or private.
   * @throws ApiError `sandbox_not_found` (also for another tenant's id)
   */
  async url(caller: Principal, id: string, port: number, request: PortUrlRequest): Promise<PortUrl> {
    await this.deps.sandboxes.require(caller.tenantId, id);
    if (request.public !== undefined) {
      await this.deps.ports.setPublic(id, port, request.public, isoNow(this.deps.clock));
    }
    const isPublic = await this.deps.ports.isPublic(id, port);
    const base = this.deps.hosts.url(id, port, this.deps.serverPort());
    if (request.signed === true) {
      const expiresAtMs = this.deps.clock.nowMs() + (request.ttlMs ?? DEFAULT_PREVIEW_TTL_MS);
      const signature = this.deps.access.sign(id, port, expiresAtMs);
      return {
        port,
        url: `${base}?${PREVIEW_SIGNATURE_PARAM}=${signature}`,
        public: isPublic,
        expiresAt: new Date(expiresAtMs).toISOString(),
        accessToken: null,
      };
    }
    return {
      port,
      url: base,
      public: isPublic,
      expiresAt: null,
      accessToken: isPublic ? null : this.deps.access.accessToken(id),
    };
  }

  /**
   * The TCP ports listening inside sandbox `id` (IPv4 and IPv6 sockets, from the sandbox's `/proc/net/tcp*`), by
   * port; a paused sandbox is resumed first unless it was created with `autoResume: false`.
   * @throws ApiError `sandbox_not_found`, `sandbox_not_running`, `sandbox_paused`, `runtime_error`
   */
  async list(caller: Principal, id: string): Promise<PortList> {
    const result = await this.deps.exec.run(caller, id, {
      cmd: ['/bin/cat', '/proc/net/tcp', '/proc/net/tcp6'],
      env: {},
      timeoutMs: 10_000,
    });
    const text = Buffer.from(result.stdout, 'base64').toString('utf8');
    const publicPorts = new Set(await this.deps.ports.publicPorts(id));
    const serverPort = this.deps.serverPort();
    const ports: ListeningPort[] = listeningSockets(text).map((socket) => ({
      ...socket,
      public: publicPorts.has(socket.port),
      url: this.deps.hosts.url(id, socket.port, serverPort),
    }));
    return { ports };
  }

  /**
   * Whether `port` of `sandboxId` answers anyone. An unknown sandbox has no public port.
   */
  isPublic(sandboxId: string, port: number): Promise<boolean> {
    return this.deps.ports.isPublic(sandboxId, port);
  }

  /**
   * Where a preview request for `port` of `sandboxId` goes. A paused sandbox is resumed (one resume for all the
   * requests that arrive meanwhile) unless it was created with `autoResume: false`; after a resume this waits up to
   * `wakeWaitMs` for the port to accept.
   * @throws ApiError `sandbox_not_found` (no such sandbox, or deleted), `sandbox_paused` (auto-resume off),
   *   `sandbox_not_running` (stopped, in error, being deleted), `unsupported` (no network), `port_not_listening`
   *   (nothing accepted after a resume), or the resume's own errors
   */
  async upstream(sandboxId: string, port: number): Promise<PreviewUpstream> {
    const tenantId = await this.deps.ports.tenantOf(sandboxId);
    if (tenantId === null) throw sandboxNotFound(sandboxId);
    let record = await this.deps.sandboxes.require(tenantId, sandboxId);
    let woke = false;
    if (record.state === 'paused' || record.state === 'pausing' || record.state === 'resuming') {
      record = await this.wake(record);
      woke = true;
    }
    if (record.state !== 'running') {
      throw new ApiError(ErrorCode.sandboxNotRunning, `sandbox ${sandboxId} is ${record.state}, not running`, {
        hint:
          record.state === 'stopped' || record.state === 'error'
            ? 'start it (`burrow start ID`, POST /v1/sandboxes/{id}/start); its preview URLs answer once it runs'
            : 'wait until it runs, then retry',
      });
    }
    const address = await this.deps.driver.ingressAddress?.(sandboxId);
    if (address === undefined || address === null) {
      throw new ApiError(ErrorCode.unsupported, `sandbox ${sandboxId} has no network on this host`, {
        hint: 'preview URLs need the gVisor driver with networking on (BURROW_NETWORK not off)',
      });
    }
    if (woke) await this.waitForPort(sandboxId, address, port);
    return { sandboxId, tenantId, address, port, woke, version: record.version };
  }

  /** Mark sandbox `sandboxId` busy until the returned function is called (an open preview request). */
  hold(sandboxId: string): () => void {
    return this.deps.activity?.hold(sandboxId) ?? (() => undefined);
  }

  private wake(record: SandboxRecord): Promise<SandboxRecord> {
    if (!record.autoResume) {
      throw new ApiError(ErrorCode.sandboxPaused, `sandbox ${record.id} is paused`, {
        hint: 'resume it first (`burrow resume ID`); it was created with autoResume: false, so requests do not wake it',
      });
    }
    const pending = this.waking.get(record.id);
    if (pending !== undefined) return pending;
    const started = this.deps.mutex
      .run(record.id, async () => {
        const current = await this.deps.sandboxes.require(record.tenantId, record.id);
        if (current.state === 'paused') this.resumeCount += 1;
        return this.deps.sandboxes.requireRunning(record.tenantId, record.id);
      })
      .finally(() => this.waking.delete(record.id));
    this.waking.set(record.id, started);
    return started;
  }

  private async waitForPort(sandboxId: string, address: string, port: number): Promise<void> {
    const deadline = this.deps.clock.nowMs() + (this.deps.wakeWaitMs ?? 10_000);
    for (;;) {
      if (await accepts(address, port, 2000)) return;
      if (this.deps.clock.nowMs() >= deadline) {
        throw new ApiError(
          ErrorCode.portNotListening,
          `sandbox ${sandboxId} resumed, but nothing accepts connections on port ${port}`,
          { hint: `start a server on 0.0.0.0:${port} inside the sandbox` },
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

/** Whether a TCP connection to `address:port` opens within `timeoutMs`. */
function accepts(address: string, port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: address, port, timeout: timeoutMs });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.once('connect', () => done(true));
    socket.once('timeout', () => done(false));
    socket.once('error', () => done(false));
  });
}

/**
 * Listening sockets in `/proc/net/tcp` and `/proc/net/tcp6` text (state `0A`), one per port (an IPv4 wildcard or
 * any-address socket wins over a loopback one).
 */
export function listeningSockets(procNetTcp: string): Array<{ port: number; address: string }> {
  const byPort = new Map<number, string>();
  for (const line of procNetTcp.split('\n')) {
    const match = /^\s*\d+:\s+([0-9A-F]{8}|[0-9A-F]{32}):([0-9A-F]{4})\s+[0-9A-F]+:[0-9A-F]{4}\s+0A\s/i.exec(line);
    if (match?.[1] === undefined || match[2] === undefined) continue;
    const port = Number.parseInt(match[2], 16);
    const address = decodeAddress(match[1]);
    const known = byPort.get(port);
    if (known === undefined || isLoopback(known)) byPort.set(port, address);
  }
  return [...byPort.entries()].sort(([a], [b]) => a - b).map(([port, address]) => ({ port, address }));
}

function isLoopback(address: string): boolean {
  return address.startsWith('127.') || address === '::1';
}

/** `/proc/net/tcp` address hex (32-bit words in host order, little-endian here) → text. */
function decodeAddress(hex: string): string {
  const words = hex.match(/.{8}/g) ?? [];
  const bytes = words.flatMap((word) => [6, 4, 2, 0].map((i) => Number.parseInt(word.slice(i, i + 2), 16)));
  if (bytes.length === 4) return bytes.join('.');
  if (bytes.every((b) => b === 0)) return '::';
  if (bytes.slice(0, 15).every((b) => b === 0) && bytes[15] === 1) return '::1';
  if (bytes.slice(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff) {
    return `::ffff:${bytes.slice(12).join('.')}`;
  }
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push((((bytes[i] ?? 0) << 8) | (bytes[i + 1] ?? 0)).toString(16));
  return groups.join(':');
}
