/**
 * The cost of memory images encrypted at rest (docs/security.md): pause and resume of an idle sandbox and of one
 * holding 512 MiB of dirty memory on a server with `BURROW_IMAGE_ENCRYPTION=1`, each row's baseline the same
 * operation on the bench's unencrypted server, the two alternating cycle by cycle in the same run.
 */
import { Sandbox } from '@burrow/sdk';
import { type Summary, summarize, time } from './stats.js';

/** One bench row (same shape as run.ts's). */
export interface EncryptionRow {
  metric: string;
  ours: Summary;
  raw: Summary | null;
  ratio: number | null;
  target: string;
}

type Conn = { apiUrl: string; apiKey: string };

/** Time between a pause and the next resume, ms (as the persistence rows: the host reaps the dead sentry). */
const SETTLE_MS = 2500;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** 512 MiB of random (incompressible, non-zero) memory, as in the persistence rows. */
const BALLAST =
  'python3 -c \'import os,time\nb=bytearray()\nfor _ in range(512): b.extend(os.urandom(1<<20))\nopen("/tmp/ballast-ready","w").close()\ntime.sleep(3600)\' >/dev/null 2>&1 &';

function row(metric: string, ours: number[], baseline: number[], target: string): EncryptionRow {
  const o = summarize(ours);
  const r = summarize(baseline);
  return { metric, ours: o, raw: r, ratio: Math.round((o.p50 / r.p50) * 100) / 100, target };
}

/** Pause then resume `sandbox`, pushing each duration. */
async function cycle(sandbox: Sandbox, pause: number[], resume: number[]): Promise<void> {
  pause.push(await time(() => sandbox.pause()));
  await sleep(SETTLE_MS);
  resume.push(await time(() => sandbox.resume()));
}

/**
 * Runs the encryption rows against `plain` (the bench's server) and `encrypted` (a server with image encryption on).
 * @returns the rows and the encrypted image sizes (the tmpfs each encrypted pause and resume holds at its peak)
 */
export async function benchImageEncryption(
  plain: Conn,
  encrypted: Conn,
  options: { iterations: number; log: (message: string) => void },
): Promise<{ rows: EncryptionRow[]; imageBytes: { idle: number; dirty: number } }> {
  const { log } = options;
  const cycles = Math.max(2, Math.min(options.iterations, 10));
  const image = { idle: 0, dirty: 0 };
  const times = () => ({ pause: [] as number[], resume: [] as number[] });

  log(`encrypted images: pause/resume idle x${cycles}`);
  const idle = { plain: times(), encrypted: times() };
  const idlePlain = await Sandbox.create({ ...plain, memoryMiB: 1024, timeoutMs: 1_800_000 });
  const idleEncrypted = await Sandbox.create({ ...encrypted, memoryMiB: 1024, timeoutMs: 1_800_000 });
  for (let i = 0; i < cycles; i++) {
    await cycle(idleEncrypted, idle.encrypted.pause, idle.encrypted.resume);
    await cycle(idlePlain, idle.plain.pause, idle.plain.resume);
  }
  image.idle = (await idleEncrypted.snapshots.create({ memory: true })).imageSizeBytes;
  await Promise.all([idlePlain.delete(), idleEncrypted.delete()]);

  log('encrypted images: pause/resume with 512 MiB dirty');
  const dirty = { plain: times(), encrypted: times() };
  for (let i = 0; i < Math.max(2, Math.min(cycles, 5)); i++) {
    for (const [conn, into] of [
      [encrypted, dirty.encrypted],
      [plain, dirty.plain],
    ] as const) {
      const sandbox = await Sandbox.create({ ...conn, memoryMiB: 1536, timeoutMs: 1_800_000 });
      await sandbox.commands.run(['sh', '-c', BALLAST]);
      await sandbox.commands.run(['sh', '-c', 'while [ ! -e /tmp/ballast-ready ]; do sleep 0.2; done'], {
        timeoutMs: 120_000,
      });
      await cycle(sandbox, into.pause, into.resume);
      if (i === 0 && conn === encrypted)
        image.dirty = (await sandbox.snapshots.create({ memory: true })).imageSizeBytes;
      await sandbox.delete();
    }
  }
  const vs = '(vs unencrypted pause and resume, same run)';
  return {
    rows: [
      row(`encrypted images: pause, idle ${vs}`, idle.encrypted.pause, idle.plain.pause, '—'),
      row(`encrypted images: resume, idle ${vs}`, idle.encrypted.resume, idle.plain.resume, '—'),
      row(`encrypted images: pause, 512 MiB dirty ${vs}`, dirty.encrypted.pause, dirty.plain.pause, '—'),
      row(`encrypted images: resume, 512 MiB dirty ${vs}`, dirty.encrypted.resume, dirty.plain.resume, '—'),
    ],
    imageBytes: image,
  };
}
