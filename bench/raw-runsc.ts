/**
 * The raw-runtime baseline: the same runsc flags and the same kind of overlay disk as the gVisor driver, driven
 * directly with runsc commands (no server, no database, no HTTP, no cgroup or disk-image setup).
 */
import { execFile, spawn } from 'node:child_process';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

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
    await this.runscDetached('create', '--bundle', dir, id);
    await this.runscDetached('start', id);
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
