import { mkdir, mkdtemp, readdir, rename, rm, symlink, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FileWatchEvent } from '@burrow/contract';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SandboxFs } from './sandbox-fs.js';
import { type DirectoryWatch, WATCH_BUDGET, watchDirectory } from './sandbox-fs-watch.js';

let base: string;
let root: string;
let outside: string;
let fs: SandboxFs;
let watch: DirectoryWatch | undefined;

beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), 'burrow-sfw-'));
  root = join(base, 'root');
  outside = join(base, 'outside');
  await mkdir(join(root, 'w'), { recursive: true });
  await mkdir(outside);
  fs = new SandboxFs(root);
});
afterEach(async () => {
  await watch?.close();
  watch = undefined;
  await rm(base, { recursive: true, force: true });
});

async function until(events: FileWatchEvent[], pred: (e: FileWatchEvent) => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!events.some(pred)) {
    if (Date.now() > deadline) throw new Error(`no matching event in ${JSON.stringify(events)}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('watchDirectory', () => {
  it('reports create, modify, rename and delete, recursively into new directories', async () => {
    const events: FileWatchEvent[] = [];
    watch = await watchDirectory(fs, '/w', (e) => events.push(e), { recursive: true });
    expect(events[0]).toEqual({ type: 'ready', path: '/w' });
    await writeFile(join(root, 'w/a.txt'), 'one');
    await until(events, (e) => e.type === 'create' && e.path === '/w/a.txt');
    await writeFile(join(root, 'w/a.txt'), 'two');
    await until(events, (e) => e.type === 'modify' && e.path === '/w/a.txt');
    await rename(join(root, 'w/a.txt'), join(root, 'w/b.txt'));
    await until(events, (e) => e.type === 'rename' && e.path === '/w/b.txt' && e.oldPath === '/w/a.txt');
    await unlink(join(root, 'w/b.txt'));
    await until(events, (e) => e.type === 'delete' && e.path === '/w/b.txt');
    await mkdir(join(root, 'w/sub'));
    await until(events, (e) => e.type === 'create' && e.path === '/w/sub' && e.isDirectory);
    await new Promise((r) => setTimeout(r, 50));
    await writeFile(join(root, 'w/sub/deep.txt'), 'x');
    await until(events, (e) => e.type === 'create' && e.path === '/w/sub/deep.txt');
  });

  it('is not recursive unless asked', async () => {
    await mkdir(join(root, 'w/sub'));
    const events: FileWatchEvent[] = [];
    watch = await watchDirectory(fs, '/w', (e) => events.push(e));
    await writeFile(join(root, 'w/sub/x'), 'x');
    await writeFile(join(root, 'w/top'), 'x');
    await until(events, (e) => e.type === 'create' && e.path === '/w/top');
    expect(events.some((e) => 'path' in e && e.path === '/w/sub/x')).toBe(false);
  });

  it('never watches a host directory while a subdirectory flips to a symlink out (race)', async () => {
    await mkdir(join(root, 'w/flip'));
    const events: FileWatchEvent[] = [];
    watch = await watchDirectory(fs, '/w', (e) => events.push(e), { recursive: true });
    let stop = false;
    const flipper = (async () => {
      for (let n = 0; !stop; n++) {
        const p = join(root, 'w/flip');
        await rm(p, { recursive: true, force: true }).catch(() => undefined);
        await symlink(n % 2 === 0 ? outside : '../../outside', p).catch(() => undefined);
        await new Promise((r) => setImmediate(r));
        await rm(p, { force: true }).catch(() => undefined);
        await mkdir(p).catch(() => undefined);
      }
    })();
    const hostWriter = (async () => {
      for (let i = 0; !stop; i++) {
        await writeFile(join(outside, `canary-${i % 20}`), String(i));
        await new Promise((r) => setTimeout(r, 1));
      }
    })();
    await new Promise((r) => setTimeout(r, 1500));
    stop = true;
    await Promise.all([flipper, hostWriter]);
    await new Promise((r) => setTimeout(r, 100));
    const leaked = events.filter((e) => 'path' in e && e.path.includes('canary'));
    expect(leaked).toEqual([]);
    expect(events.some((e) => e.type === 'create' && e.path === '/w/flip')).toBe(true);
  });

  it('holds at most WATCH_BUDGET.max directory handles over all watches (a few big recursive watches exhausted the fds)', async () => {
    for (let i = 0; i < 10; i++) await mkdir(join(root, `w/d${i}`));
    const savedMax = WATCH_BUDGET.max;
    const usedBefore = WATCH_BUDGET.used;
    WATCH_BUDGET.max = usedBefore + 6;
    const fdsBefore = (await readdir('/proc/self/fd')).length;
    const watches: DirectoryWatch[] = [];
    try {
      for (let i = 0; i < 3; i++) watches.push(await watchDirectory(fs, '/w', () => undefined, { recursive: true }));
      // The first watch: its top directory and 5 more; the others: their top directory only.
      expect(WATCH_BUDGET.used - usedBefore).toBe(8);
      expect((await readdir('/proc/self/fd')).length - fdsBefore).toBeLessThanOrEqual(8);
    } finally {
      WATCH_BUDGET.max = savedMax;
      for (const w of watches) await w.close();
    }
    expect(WATCH_BUDGET.used).toBe(usedBefore);
  });

  it('ends when the watched directory is removed', async () => {
    const events: FileWatchEvent[] = [];
    watch = await watchDirectory(fs, '/w', (e) => events.push(e));
    await rm(join(root, 'w'), { recursive: true });
    await until(events, (e) => e.type === 'end');
  });
});
