/**
 * The raw-runtime baseline: the same runsc flags and the same kind of overlay disk as the gVisor driver, driven
 * directly with runsc commands (no server, no database, no HTTP, no cgroup or disk-image setup).
 */
import { execFile, spawn } from 'node:child_process';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { restoreReadFlags } from '@burrow/runtime-gvisor';

const run = promisify(execFile);

export class RawRunsc {
  constructor(
    private readonly workDir: string,
    private readonly rootfsDir: string,
    private readonly platform = 'systrap',
    private readonly runsc = 'runsc',
  ) {}

  private flags(): string[] {
    return [
      '--root',
      join(this.workDir, 'state'),
      `--platform=${this.platform}`,
      '--network=none',
      '--overlay2=none',
      '--file-access=shared',
    ];
  }

  private async runsc_(...args: string[]): Promise<string> {
    const { stdout } = await run(this.runsc, [...this.flags(), ...args], { maxBuffer: 16 << 20 });
    return stdout;
  }

  /**
   * `runsc create`/`start` hand their stdio to the sandbox, so piped stdio never reaches EOF (research
   * probe-gvisor-2022 §2): run them with stdio ignored and wait for the process exit, not for the pipes.
   */
  private runscDetached(...args: string[]): Promise<void> {
    return new Promise((resolve, reject) => {
      const child = spawn(this.runsc, [...this.flags(), ...args], { stdio: 'ignore' });
      child.on('error', reject);
      child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`runsc ${args[0]} exited ${code}`))));
    });
  }

  /** Mount an overlay over the template, write a bundle, `runsc create` + `start` a `sleep infinity` init. */
  async create(id: string): Promise<void> {
    await this.bundle(id);
    await this.runscDetached('create', '--bundle', join(this.workDir, id), id);
    await this.runscDetached('start', id);
  }

  /** {@link create} with each step timed, ms: overlay mount + bundle, `runsc create`, `runsc start`. */
  async createSteps(id: string): Promise<{ overlayMs: number; createMs: number; startMs: number }> {
    const t0 = performance.now();
    await this.bundle(id);
    const t1 = performance.now();
    await this.runscDetached('create', '--bundle', join(this.workDir, id), id);
    const t2 = performance.now();
    await this.runscDetached('start', id);
    return { overlayMs: t1 - t0, createMs: t2 - t1, startMs: performance.now() - t2 };
  }

  /** Mount the overlay of `id` (its upper dir kept) and write its bundle. */
  private async bundle(id: string): Promise<void> {
    const dir = join(this.workDir, id);
    for (const d of ['upper', 'work', 'rootfs']) await mkdir(join(dir, d), { recursive: true });
    await run('mount', [
      '-t',
      'overlay',
      'overlay',
      '-o',
      `lowerdir=${this.rootfsDir},upperdir=${join(dir, 'upper')},workdir=${join(dir, 'work')}`,
      join(dir, 'rootfs'),
    ]);
    const spec = {
      ociVersion: '1.0.0',
      process: {
        terminal: false,
        user: { uid: 0, gid: 0 },
        args: ['sleep', 'infinity'],
        env: ['PATH=/usr/bin:/bin'],
        cwd: '/',
      },
      root: { path: join(dir, 'rootfs'), readonly: false },
      hostname: id,
      mounts: [
        { destination: '/proc', type: 'proc', source: 'proc' },
        { destination: '/dev', type: 'tmpfs', source: 'tmpfs' },
        { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
      ],
      linux: { namespaces: [{ type: 'pid' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }] },
    };
    await writeFile(join(dir, 'config.json'), JSON.stringify(spec));
  }

  /**
   * The raw pause: `runsc checkpoint --compression=none --direct` (the sandbox exits), then unmount. The container
   * record is deleted by {@link release}, outside the timed part (runsc waits there for the host to reap the sentry).
   */
  async checkpoint(id: string, imageDir: string, options: { leaveRunning?: boolean } = {}): Promise<void> {
    await rm(imageDir, { recursive: true, force: true });
    await mkdir(imageDir, { recursive: true });
    const leave = options.leaveRunning ? ['--leave-running'] : [];
    await this.runsc_('checkpoint', ...leave, '--compression=none', '--direct', `--image-path=${imageDir}`, id);
    if (!options.leaveRunning) await run('umount', [join(this.workDir, id, 'rootfs')]);
  }

  /** Drop the container record after a checkpoint. */
  async release(id: string): Promise<void> {
    await this.runsc_('delete', '-force', id).catch(() => undefined);
  }

  /** `runsc pause` / `runsc resume`. */
  async hold(id: string, still: boolean): Promise<void> {
    await this.runsc_(still ? 'pause' : 'resume', id);
  }

  /**
   * The raw resume: mount again, `runsc restore --detach`, with the driver's read flags ({@link restoreReadFlags}:
   * `--direct` only for a pages file over 32 MiB), so ours and raw read the image the same way.
   */
  async restore(id: string, imageDir: string): Promise<void> {
    await this.bundle(id);
    await this.runscDetached(
      'restore',
      ...(await restoreReadFlags(imageDir)),
      `--image-path=${imageDir}`,
      '--bundle',
      join(this.workDir, id),
      '--detach',
      id,
    );
  }

  /** A raw fork child: copy the parent's upper dir, then restore the image onto it under `childId`. */
  async forkChild(parentId: string, childId: string, imageDir: string): Promise<void> {
    await mkdir(join(this.workDir, childId), { recursive: true });
    await run('cp', ['-a', join(this.workDir, parentId, 'upper'), join(this.workDir, childId, 'upper')]);
    await this.restore(childId, imageDir);
  }

  /** `runsc exec ID argv…`. */
  async exec(id: string, ...argv: string[]): Promise<string> {
    return this.runsc_('exec', id, ...argv);
  }

  /** `runsc exec ID argv…` with its stdout counted and discarded; resolves with the byte count. */
  async execCount(id: string, ...argv: string[]): Promise<number> {
    const child = spawn(this.runsc, [...this.flags(), 'exec', id, ...argv], { stdio: ['ignore', 'pipe', 'ignore'] });
    let bytes = 0;
    child.stdout.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
    });
    await new Promise((resolve) => child.on('close', resolve));
    return bytes;
  }

  /** `runsc delete -force`, unmount, remove the directory. */
  async delete(id: string): Promise<void> {
    await this.runsc_('delete', '-force', id).catch(() => undefined);
    const dir = join(this.workDir, id);
    await run('umount', [join(dir, 'rootfs')]).catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  }
}
