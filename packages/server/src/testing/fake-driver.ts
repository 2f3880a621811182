import { type ChildProcess, spawn } from 'node:child_process';
import { cp, mkdir, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type {
  Capability,
  CheckpointInfo,
  CreateFromSnapshotOptions,
  CreateOptions,
  ExecOptions,
  ForkOptions,
  HostResources,
  ObservedSandbox,
  ProcessExit,
  RuntimeDriver,
  RuntimeEvent,
  SandboxProcess,
  SnapshotOptions,
  SpawnOptions,
} from '@burrow/runtime';
import { RuntimeError } from '@burrow/runtime';

const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * A FAKE RuntimeDriver for the fast API test layer. It is a test double, NOT isolation: a "sandbox" is a plain
 * host directory `<baseDir>/<id>/rootfs`, and `exec` runs argv as a host process (in its own process group) with
 * the cwd mapped under that directory. Use it only in tests; real isolation is `GvisorDriver`.
 */
export class FakeDriver implements RuntimeDriver {
  readonly name = 'fake';
  /** The fake "checkpoints" by marking a sandbox paused (its processes keep running on the host: a fake). */
  readonly capabilities: ReadonlySet<Capability> = new Set<Capability>(['checkpoint', 'fork']);
  private readonly paused = new Set<string>();
  /** Sandbox ids whose next `create` fails after leaving a partial directory behind. */
  readonly failCreateFor = new Set<string>();
  /** When true, every `create` fails after leaving a partial directory behind. */
  failAllCreates = false;
  /** What {@link ingressAddress} answers: a host address where a test serves the "sandbox's" ports. @default null */
  ingressHost: string | null = null;
  /** Calls made, for assertions. */
  readonly calls: Array<{ verb: string; sandboxId: string }> = [];
  private readonly events = new Map<string, RuntimeEvent[]>();
  private readonly stopped = new Set<string>();
  private readonly children = new Map<string, Set<ChildProcess>>();

  /** @param baseDir host directory holding one subdirectory per fake sandbox (trusted, test-owned) */
  constructor(readonly baseDir: string) {}

  /** {@link ingressHost}: the fake's "sandbox ports" are whatever the test serves there. */
  async ingressAddress(_sandboxId: string): Promise<string | null> {
    return this.ingressHost;
  }

  async create(options: CreateOptions): Promise<void> {
    this.calls.push({ verb: 'create', sandboxId: options.sandboxId });
    const root = this.rootDir(options.sandboxId);
    await mkdir(join(root, 'root'), { recursive: true });
    await mkdir(join(root, 'tmp'), { recursive: true });
    if (this.failAllCreates || this.failCreateFor.delete(options.sandboxId)) {
      throw new RuntimeError('fake create failure (injected by the test)');
    }
  }

  async exec(sandboxId: string, options: ExecOptions): Promise<SandboxProcess> {
    this.calls.push({ verb: 'exec', sandboxId });
    if ((await this.observe(sandboxId)).status !== 'running') {
      throw new RuntimeError(`sandbox ${sandboxId} does not run`);
    }
    const cwd = join(this.rootDir(sandboxId), options.cwd);
    const st = await stat(cwd).catch(() => null);
    if (st === null || !st.isDirectory()) throw new RuntimeError(`cwd ${options.cwd} is not a directory`);
    const child = spawn(options.argv[0] ?? '/bin/false', options.argv.slice(1), {
      cwd,
      env: { PATH: DEFAULT_PATH, ...options.env },
      stdio: ['pipe', 'pipe', 'pipe'],
      detached: true,
    });
    const set = this.children.get(sandboxId) ?? new Set<ChildProcess>();
    set.add(child);
    this.children.set(sandboxId, set);
    const exited = new Promise<ProcessExit>((resolve) => {
      child.on('error', () => resolve({ exitCode: 127, signal: null }));
      child.on('close', (code, signal) => {
        set.delete(child);
        resolve(signal === null ? { exitCode: code ?? 0, signal: null } : { exitCode: null, signal });
      });
    });
    if (child.stdin === null || child.stdout === null || child.stderr === null) throw new RuntimeError('no pipes');
    return {
      stdin: child.stdin,
      stdout: child.stdout,
      stderr: child.stderr,
      kill: async (signal) => killGroup(child, signal),
      exited,
    };
  }

  rootDir(sandboxId: string): string {
    return join(this.baseDir, sandboxId, 'rootfs');
  }

  async observe(sandboxId: string): Promise<ObservedSandbox> {
    const events = this.events.get(sandboxId) ?? [];
    this.events.delete(sandboxId);
    const exists = await stat(this.rootDir(sandboxId)).then(
      () => true,
      () => false,
    );
    const status = !exists
      ? 'missing'
      : this.paused.has(sandboxId)
        ? 'paused'
        : this.stopped.has(sandboxId)
          ? 'stopped'
          : 'running';
    return { status, events };
  }

  async delete(sandboxId: string): Promise<void> {
    this.calls.push({ verb: 'delete', sandboxId });
    for (const child of this.children.get(sandboxId) ?? []) killGroup(child, 'SIGKILL');
    this.children.delete(sandboxId);
    this.stopped.delete(sandboxId);
    this.paused.delete(sandboxId);
    await rm(join(this.baseDir, sandboxId), { recursive: true, force: true });
  }

  async listHostResources(): Promise<HostResources> {
    const names = await readdir(this.baseDir).catch(() => [] as string[]);
    return { sandboxIds: names.filter((n) => n.startsWith('sbx_')) };
  }

  /** Test hook: report `event` on the next `observe` of `sandboxId`. */
  injectEvent(sandboxId: string, event: RuntimeEvent): void {
    this.events.set(sandboxId, [...(this.events.get(sandboxId) ?? []), event]);
  }

  /** Test hook: make the container vanish from the "host" (as if someone ran `runsc delete` by hand). */
  async vanish(sandboxId: string): Promise<void> {
    await rm(join(this.baseDir, sandboxId), { recursive: true, force: true });
  }

  /** Test hook: make the sandbox's init "exit". */
  exitInit(sandboxId: string): void {
    this.stopped.add(sandboxId);
  }

  async pause(sandboxId: string): Promise<CheckpointInfo> {
    this.calls.push({ verb: 'pause', sandboxId });
    this.paused.add(sandboxId);
    return { imageSizeBytes: 1, diskSizeBytes: 1, runtimeVersion: 'fake' };
  }

  async resume(options: CreateOptions): Promise<void> {
    this.calls.push({ verb: 'resume', sandboxId: options.sandboxId });
    this.paused.delete(options.sandboxId);
    this.stopped.delete(options.sandboxId);
  }

  async stop(sandboxId: string): Promise<void> {
    this.calls.push({ verb: 'stop', sandboxId });
    for (const child of this.children.get(sandboxId) ?? []) killGroup(child, 'SIGKILL');
    this.paused.delete(sandboxId);
    this.stopped.add(sandboxId);
  }

  async fork(sandboxId: string, options: ForkOptions): Promise<void> {
    this.calls.push({ verb: 'fork', sandboxId });
    for (const child of options.children) {
      await cp(join(this.baseDir, sandboxId), join(this.baseDir, child.sandboxId), { recursive: true });
    }
  }

  async snapshot(sandboxId: string, options: SnapshotOptions): Promise<CheckpointInfo> {
    this.calls.push({ verb: 'snapshot', sandboxId });
    await cp(this.rootDir(sandboxId), join(options.targetDir, 'rootfs'), { recursive: true });
    await writeFile(join(options.targetDir, 'memory'), options.memory ? 'yes' : 'no');
    return { imageSizeBytes: options.memory ? 1 : 0, diskSizeBytes: 1, runtimeVersion: 'fake' };
  }

  async createFromSnapshot(options: CreateFromSnapshotOptions): Promise<void> {
    this.calls.push({ verb: 'createFromSnapshot', sandboxId: options.sandboxId });
    await cp(join(options.sourceDir, 'rootfs'), this.rootDir(options.sandboxId), { recursive: true });
  }

  async settle(): Promise<void> {}

  async spawn(sandboxId: string, options: SpawnOptions): Promise<void> {
    const process = await this.exec(sandboxId, { ...options });
    process.stdin.end();
  }

  /** Kill every process the fake started. */
  async close(): Promise<void> {
    for (const set of this.children.values()) for (const child of set) killGroup(child, 'SIGKILL');
    this.children.clear();
  }
}

function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined || child.exitCode !== null) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    child.kill(signal);
  }
}
