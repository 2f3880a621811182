/**
 * Issue 3's numbers: pause, resume and fork (×1, ×10) of an idle sandbox and one holding 512 MiB of dirty memory,
 * with image sizes; against raw `runsc checkpoint` / `restore` in the same run.
 */
import { join } from 'node:path';
import { Sandbox } from '@burrow/sdk';
import type { RawRunsc } from './raw-runsc.js';
import { type Summary, summarize, time } from './stats.js';

/** One bench row (same shape as run.ts's). */
export interface PersistenceRow {
  metric: string;
  ours: Summary;
  raw: Summary | null;
  ratio: number | null;
  target: string;
}

/** Time between a pause and the next resume, ms: lets the host reap the dead sentry (see ADR 0002). */
const SETTLE_MS = 2500;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** 512 MiB of random (incompressible, non-zero) memory, filled 1 MiB at a time to stay under the limit. */
const BALLAST =
  'python3 -c \'import os,time\nb=bytearray()\nfor _ in range(512): b.extend(os.urandom(1<<20))\nopen("/tmp/ballast-ready","w").close()\ntime.sleep(3600)\' >/dev/null 2>&1 &';

function row(metric: string, ours: number[], raw: number[] | null, target: string): PersistenceRow {
  const o = summarize(ours);
  const r = raw ? summarize(raw) : null;
  return { metric, ours: o, raw: r, ratio: r ? Math.round((o.p50 / r.p50) * 100) / 100 : null, target };
}

/** Runs the persistence rows. `workDir` holds the raw images. */
export async function benchPersistence(
  conn: { apiUrl: string; apiKey: string },
  raw: RawRunsc,
  options: { iterations: number; workDir: string; log: (message: string) => void },
): Promise<{ rows: PersistenceRow[]; imageBytes: { idle: number; dirty: number } }> {
  const { log } = options;
  const cycles = Math.max(2, Math.min(options.iterations, 10));
  const rows: PersistenceRow[] = [];
  const image = { idle: 0, dirty: 0 };

  log(`pause/resume idle x${cycles}`);
  const idle = await Sandbox.create({ ...conn, memoryMiB: 1024, timeoutMs: 1_800_000 });
  const pause: number[] = [];
  const resume: number[] = [];
  const rawPause: number[] = [];
  const rawResume: number[] = [];
  await raw.create('rawpr000');
  // Ours and raw alternate cycle by cycle, not all of ours then all of raw: on a shared machine a load swing of a
  // minute then lands on both sides of the ratio, not on one.
  for (let i = 0; i < cycles; i++) {
    pause.push(await time(() => idle.pause()));
    await sleep(SETTLE_MS);
    resume.push(await time(() => idle.resume()));
    const dir = join(options.workDir, `img-idle-${i}`);
    rawPause.push(await time(() => raw.checkpoint('rawpr000', dir)));
    await raw.release('rawpr000');
    await sleep(SETTLE_MS);
    rawResume.push(await time(() => raw.restore('rawpr000', dir)));
  }
  const snap = await idle.snapshots.create({ memory: true });
  image.idle = snap.imageSizeBytes;
  rows.push(row('pause, idle', pause, rawPause, '≤ 2 s per GiB dirty'));
  rows.push(row('resume, idle', resume, rawResume, 'p50 ≤ 200 ms'));

  for (const count of [1, 10]) {
    log(`fork x${count}`);
    const forks: number[] = [];
    const rawForks: number[] = [];
    // 3 samples of each give fork x1 p50s up to 32 % apart in two quiet runs (766-873 ms, then 946-1033), so
    // fork x1 takes `cycles` samples (10 at --iterations 10), fork x10 five.
    const samples = count === 1 ? cycles : Math.max(2, Math.min(cycles, 5));
    for (let i = 0; i < samples; i++) {
      let children: Sandbox[] = [];
      forks.push(
        await time(async () => {
          children = await idle.fork({ count });
        }),
      );
      for (const child of children) await child.delete();
      const dir = join(options.workDir, `img-fork-${count}-${i}`);
      const ids = Array.from(
        { length: count },
        (_, k) => `rawf${String(count).padStart(2, '0')}${i}${String(k).padStart(2, '0')}`,
      );
      rawForks.push(
        await time(async () => {
          await raw.hold('rawpr000', true);
          await raw.checkpoint('rawpr000', dir, { leaveRunning: true });
          await raw.hold('rawpr000', false);
          for (const id of ids) await raw.forkChild('rawpr000', id, dir);
        }),
      );
      for (const id of ids) await raw.delete(id);
    }
    rows.push(row(`fork x${count}, idle (total)`, forks, rawForks, count === 10 ? '≤ 2 s total' : '—'));
  }
  await idle.delete();
  await raw.delete('rawpr000');

  log('pause/resume with 512 MiB dirty');
  const dirtyPause: number[] = [];
  const dirtyResume: number[] = [];
  const rawDirtyPause: number[] = [];
  const rawDirtyResume: number[] = [];
  // Five samples at --iterations 10, not three: a p50 of three is its middle sample.
  for (let i = 0; i < Math.max(2, Math.min(cycles, 5)); i++) {
    const sandbox = await Sandbox.create({ ...conn, memoryMiB: 1536, timeoutMs: 1_800_000 });
    await sandbox.commands.run(['sh', '-c', BALLAST]);
    await sandbox.commands.run(['sh', '-c', 'while [ ! -e /tmp/ballast-ready ]; do sleep 0.2; done'], {
      timeoutMs: 120_000,
    });
    if (i === 0) image.dirty = (await sandbox.snapshots.create({ memory: true })).imageSizeBytes;
    dirtyPause.push(await time(() => sandbox.pause()));
    await sleep(SETTLE_MS);
    dirtyResume.push(await time(() => sandbox.resume()));
    await sandbox.delete();
    const id = `rawdirt${i}`;
    await raw.create(id);
    await raw.exec(id, 'sh', '-c', BALLAST);
    await raw.exec(id, 'sh', '-c', 'while [ ! -e /tmp/ballast-ready ]; do sleep 0.2; done');
    const dir = join(options.workDir, `img-dirty-${i}`);
    rawDirtyPause.push(await time(() => raw.checkpoint(id, dir)));
    await raw.release(id);
    await sleep(SETTLE_MS);
    rawDirtyResume.push(await time(() => raw.restore(id, dir)));
    await raw.delete(id);
  }
  rows.push(row('pause, 512 MiB dirty', dirtyPause, rawDirtyPause, '≤ 1 s (2 s/GiB)'));
  rows.push(row('resume, 512 MiB dirty', dirtyResume, rawDirtyResume, '—'));
  return { rows, imageBytes: image };
}
