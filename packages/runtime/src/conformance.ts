import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Resources } from '@burrow/contract';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type ProcessExit, type RuntimeDriver, RuntimeError, type TemplateRef } from './driver.js';

/** What {@link runDriverConformance} needs from a driver under test. */
export interface ConformanceSubject {
  driver: RuntimeDriver;
  template: TemplateRef;
  /** Runs once after every case. */
  cleanup(): Promise<void>;
  /** Driver-specific leftovers of a sandbox on the host (container, mount, cgroup, loop device...), one line each. */
  leftovers?(sandboxId: string): Promise<string[]>;
}

/** Output and exit of a finished command. */
export interface CollectedRun extends ProcessExit {
  stdout: Buffer;
  stderr: Buffer;
}

const ID_ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';
const SMALL: Resources = { cpuCount: 1, memoryMiB: 256, diskMiB: 512 };
const ENV = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', HOME: '/root' };

/** A fresh sandbox id (`sbx_` + 20 base32 characters). */
export function testSandboxId(): string {
  const bytes = randomBytes(20);
  return `sbx_${[...bytes].map((byte) => ID_ALPHABET[byte % 32]).join('')}`;
}

/** Run a command to completion in a sandbox and collect its output. */
export async function runInSandbox(
  driver: RuntimeDriver,
  sandboxId: string,
  argv: string[],
  options: { stdin?: Buffer | string; env?: Record<string, string>; cwd?: string } = {},
): Promise<CollectedRun> {
  const process = await driver.exec(sandboxId, { argv, env: options.env ?? ENV, cwd: options.cwd ?? '/' });
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  process.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
  process.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
  process.stdin.end(options.stdin ?? '');
  const exit = await process.exited;
  return { ...exit, stdout: Buffer.concat(stdout), stderr: Buffer.concat(stderr) };
}

/**
 * The driver conformance suite: registers vitest cases that exercise a real driver on a real host.
 * Every case deletes the sandboxes it created, even when it fails.
 * @example
 * runDriverConformance('gvisor', async () => ({ driver, template, cleanup: async () => {} }));
 */
export function runDriverConformance(name: string, makeDriver: () => Promise<ConformanceSubject>): void {
  describe(`RuntimeDriver conformance: ${name}`, () => {
    let subject: ConformanceSubject;
    let created: string[] = [];
    let shared: string;

    const create = async (resources: Resources = SMALL): Promise<string> => {
      const sandboxId = testSandboxId();
      created.push(sandboxId);
      await subject.driver.create({ sandboxId, template: subject.template, resources, hostname: 'conformance' });
      return sandboxId;
    };
    const run = (sandboxId: string, argv: string[], options?: Parameters<typeof runInSandbox>[3]) =>
      runInSandbox(subject.driver, sandboxId, argv, options);
    const expectGone = async (sandboxId: string): Promise<void> => {
      expect((await subject.driver.listHostResources()).sandboxIds).not.toContain(sandboxId);
      expect(existsSync(subject.driver.rootDir(sandboxId))).toBe(false);
      const mountinfo = await readFile('/proc/self/mountinfo', 'utf8');
      expect(mountinfo).not.toContain(`/${sandboxId}/`);
      expect((await subject.leftovers?.(sandboxId)) ?? []).toEqual([]);
    };

    beforeAll(async () => {
      subject = await makeDriver();
      shared = testSandboxId();
      await subject.driver.create({
        sandboxId: shared,
        template: subject.template,
        resources: SMALL,
        hostname: 'shared',
      });
    });
    afterEach(async () => {
      const ids = created;
      created = [];
      for (const sandboxId of ids) await subject.driver.delete(sandboxId);
    });
    afterAll(async () => {
      if (shared) await subject?.driver.delete(shared);
      await subject?.cleanup();
    });

    it('runs python and returns its stdout and exit code 0', async () => {
      const result = await run(shared, ['python3', '-c', 'print(6*7)']);
      expect(result.stdout.toString()).toBe('42\n');
      expect(result).toMatchObject({ exitCode: 0, signal: null });
    });

    it('resolves localhost and its own hostname to loopback (no network needed)', async () => {
      // Found by a new user: the template has no /etc/hosts, so `localhost` did not resolve ("Temporary failure in
      // name resolution") and a dev server on localhost could not be reached from inside the sandbox.
      const result = await run(shared, ['sh', '-c', 'getent hosts localhost; getent hosts "$(hostname)"']);
      expect(result.stdout.toString()).toMatch(/^(127\.0\.0\.1|::1)\s+localhost\b.*\n127\.0\.1\.1\s+shared\n$/);
      expect(result.exitCode).toBe(0);
    });

    it("names itself in /etc/hostname and carries no name server of the host's", async () => {
      // Found by a new user: the template kept the build host's /etc/hostname and /etc/resolv.conf.
      const result = await run(shared, [
        'sh',
        '-c',
        'hostname; cat /etc/hostname; grep -c nameserver /etc/resolv.conf',
      ]);
      expect(result.stdout.toString()).toBe('shared\nshared\n0\n');
    });

    it('reports exact exit codes, including ones above 128', async () => {
      expect((await run(shared, ['sh', '-c', 'exit 3'])).exitCode).toBe(3);
      expect(await run(shared, ['sh', '-c', 'exit 137'])).toMatchObject({ exitCode: 137, signal: null });
    });

    it('keeps stderr separate from stdout', async () => {
      const result = await run(shared, ['sh', '-c', 'echo out; echo err >&2']);
      expect(result.stdout.toString()).toBe('out\n');
      expect(result.stderr.toString()).toBe('err\n');
    });

    it('round-trips binary stdin through cat', async () => {
      const bytes = Buffer.from([0, 1, 2, 0xff, 0xfe, 0xc3, 0x28, 0x0a, 0x00, 0x80]);
      const result = await run(shared, ['cat'], { stdin: bytes });
      expect(result.stdout.equals(bytes)).toBe(true);
    });

    it('reports a signal death by name', async () => {
      expect(await run(shared, ['sh', '-c', 'kill -TERM $$'])).toMatchObject({ exitCode: null, signal: 'SIGTERM' });
    });

    it('kill() stops a process inside the sandbox', async () => {
      const process = await subject.driver.exec(shared, { argv: ['sleep', '1000'], env: ENV, cwd: '/' });
      process.stdout.resume();
      process.stderr.resume();
      process.stdin.end();
      const started = Date.now();
      await process.kill('SIGKILL');
      expect(await process.exited).toMatchObject({ exitCode: null, signal: 'SIGKILL' });
      expect(Date.now() - started).toBeLessThan(10_000);
      const ps = await run(shared, ['ps', '-eo', 'args']);
      expect(ps.stdout.toString()).not.toContain('sleep 1000');
    });

    it('kill() reaches the whole process group, so a shell and its children end together', async () => {
      const process = await subject.driver.exec(shared, {
        argv: ['sh', '-c', 'echo before; sleep 997; echo after'],
        env: ENV,
        cwd: '/',
      });
      const out: Buffer[] = [];
      process.stdout.on('data', (c: Buffer) => out.push(c));
      process.stderr.resume();
      process.stdin.end();
      await new Promise((r) => setTimeout(r, 500));
      const started = Date.now();
      await process.kill('SIGKILL');
      expect(await process.exited).toMatchObject({ exitCode: null, signal: 'SIGKILL' });
      expect(Date.now() - started).toBeLessThan(10_000);
      expect(Buffer.concat(out).toString()).toBe('before\n');
      const ps = await run(shared, ['ps', '-eo', 'args']);
      expect(ps.stdout.toString()).not.toContain('sleep 997');
    });

    it('returns soon after the process exits even when a background child holds stdout open', async () => {
      const started = Date.now();
      const result = await run(shared, ['sh', '-c', 'sleep 996 & echo parent-done']);
      expect(result).toMatchObject({ exitCode: 0, signal: null });
      expect(result.stdout.toString()).toBe('parent-done\n');
      expect(Date.now() - started).toBeLessThan(20_000);
      await run(shared, ['sh', '-c', 'pkill -f "sleep 996" || true']);
    });

    it('honours env and cwd', async () => {
      const result = await run(shared, ['sh', '-c', 'echo "$GREETING"; pwd'], {
        env: { ...ENV, GREETING: 'hello world' },
        cwd: '/usr/lib',
      });
      expect(result.stdout.toString()).toBe('hello world\n/usr/lib\n');
    });

    it("a program that cannot be executed exits 126; a missing cwd is the caller's error", async () => {
      expect((await run(shared, ['/root'])).exitCode).toBe(126);
      const error = await subject.driver.exec(shared, { argv: ['true'], env: ENV, cwd: '/no/such/dir' }).then(
        () => null,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(RuntimeError);
      expect((error as RuntimeError).code).toBe('invalid_request');
    });

    it('a missing program exits 127 with a message', async () => {
      const result = await run(shared, ['no-such-program-here']);
      expect(result.exitCode).toBe(127);
      expect(result.stderr.toString()).toContain('no-such-program-here');
    });

    it('shares files with the host in both directions, except /tmp (private to the sandbox)', async () => {
      const root = subject.driver.rootDir(shared);
      const name = `/root/host-${randomBytes(4).toString('hex')}`;
      // The sandbox looks the name up first, so a cached negative lookup would hide the later host write.
      expect((await run(shared, ['cat', name])).exitCode).not.toBe(0);
      await writeFile(join(root, name), 'from host\n');
      expect((await run(shared, ['cat', name])).stdout.toString()).toBe('from host\n');
      await writeFile(join(root, name), 'changed on host\n');
      expect((await run(shared, ['cat', name])).stdout.toString()).toBe('changed on host\n');
      expect((await run(shared, ['sh', '-c', `echo from sandbox > ${name}.s`])).exitCode).toBe(0);
      expect(await readFile(join(root, `${name}.s`), 'utf8')).toBe('from sandbox\n');
      // /tmp is a tmpfs inside the sandbox (docs/adr/0005): neither side sees the other's files there.
      const inTmp = `/tmp/host-${randomBytes(4).toString('hex')}`;
      await writeFile(join(root, inTmp), 'from host\n');
      expect((await run(shared, ['cat', inTmp])).exitCode).not.toBe(0);
      expect((await run(shared, ['sh', '-c', `echo from sandbox > ${inTmp}.s`])).exitCode).toBe(0);
      await expect(readFile(join(root, `${inTmp}.s`), 'utf8')).rejects.toThrow(/ENOENT/);
    });

    it('kills a process over the memory limit, keeps the sandbox and reports OOMKilled', async () => {
      const sandboxId = await create({ cpuCount: 1, memoryMiB: 256, diskMiB: 512 });
      await subject.driver.observe(sandboxId);
      const hog = await run(sandboxId, [
        'python3',
        '-c',
        'b = bytearray(1 << 30)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint("survived")',
      ]);
      expect(hog.stdout.toString()).not.toContain('survived');
      expect(hog.exitCode).not.toBe(0);
      expect((await run(sandboxId, ['echo', 'still here'])).stdout.toString()).toBe('still here\n');
      const observed = await subject.driver.observe(sandboxId);
      expect(observed.status).toBe('running');
      expect(observed.events.map((event) => event.type)).toContain('OOMKilled');
    });

    it('survives a fork bomb without harming the host or another sandbox', async () => {
      const bombed = await create();
      const bomb = await run(bombed, [
        'timeout',
        '-s',
        'KILL',
        '8',
        'sh',
        '-c',
        // The bomb's children must not hold the exec's output pipes open after the timeout.
        'exec >/dev/null 2>&1; f() { f | f & }; f; sleep 7',
      ]);
      expect(bomb.exitCode === 137 || bomb.signal !== null || bomb.exitCode === 0).toBe(true);
      expect((await run(shared, ['echo', 'neighbour ok'])).stdout.toString()).toBe('neighbour ok\n');
      // Bomb processes forked while the timeout killed their group live on for a moment at the process cap, where
      // nothing new can start; they die out on their own, and the sandbox must then answer again.
      let alive: Awaited<ReturnType<typeof run>> | null = null;
      for (let i = 0; i < 20 && alive === null; i++) {
        alive = await run(bombed, ['echo', 'alive']).catch(() => null);
        if (alive === null) await new Promise((resolve) => setTimeout(resolve, 500));
      }
      if (alive === null) {
        // The sandbox died: it must say so, not vanish silently.
        let observed = await subject.driver.observe(bombed);
        for (let i = 0; i < 20 && observed.status === 'running'; i++) {
          await new Promise((resolve) => setTimeout(resolve, 250));
          observed = await subject.driver.observe(bombed);
        }
        expect(observed.status).toBe('stopped');
        expect(observed.events.map((event) => event.type)).toContain('RuntimeExited');
      } else {
        expect(alive.stdout.toString()).toBe('alive\n');
      }
    });

    it('applies the CPU quota (loosely)', async () => {
      const sandboxId = await create({ cpuCount: 0.5, memoryMiB: 256, diskMiB: 512 });
      const script = [
        'import time',
        'w0, c0 = time.monotonic(), time.process_time()',
        'while time.monotonic() - w0 < 2: pass',
        'print((time.process_time() - c0) / (time.monotonic() - w0))',
      ].join('\n');
      const ratio = Number((await run(sandboxId, ['python3', '-c', script])).stdout.toString());
      expect(ratio).toBeGreaterThan(0);
      expect(ratio).toBeLessThan(0.85);
    });

    it('create is idempotent', async () => {
      const sandboxId = await create();
      await run(sandboxId, ['sh', '-c', 'echo kept > /root/marker']);
      await subject.driver.create({ sandboxId, template: subject.template, resources: SMALL, hostname: 'again' });
      expect((await run(sandboxId, ['cat', '/root/marker'])).stdout.toString()).toBe('kept\n');
      expect((await subject.driver.observe(sandboxId)).status).toBe('running');
    });

    it('delete is idempotent and leaves nothing behind', async () => {
      const sandboxId = await create();
      await run(sandboxId, ['sh', '-c', 'sleep 1000 >/dev/null 2>&1 & echo started']);
      expect((await subject.driver.listHostResources()).sandboxIds).toContain(sandboxId);
      await subject.driver.delete(sandboxId);
      await expectGone(sandboxId);
      await subject.driver.delete(sandboxId);
      await expectGone(sandboxId);
      expect((await subject.driver.observe(sandboxId)).status).toBe('missing');
    });

    it('a failed create leaves nothing behind', async () => {
      const sandboxId = testSandboxId();
      created.push(sandboxId);
      const template = { id: 'missing', rootfsDir: join(subject.template.rootfsDir, '..', 'no-such-rootfs') };
      await expect(
        subject.driver.create({ sandboxId, template, resources: SMALL, hostname: 'broken' }),
      ).rejects.toThrow();
      await expectGone(sandboxId);
    });

    it('listHostResources lists live sandboxes and not deleted ones', async () => {
      const live = await create();
      const gone = await create();
      await subject.driver.delete(gone);
      const { sandboxIds } = await subject.driver.listHostResources();
      expect(sandboxIds).toContain(live);
      expect(sandboxIds).toContain(shared);
      expect(sandboxIds).not.toContain(gone);
    });

    it('exec in a missing sandbox throws', async () => {
      await expect(run(testSandboxId(), ['true'])).rejects.toThrow();
    });
  });
}
