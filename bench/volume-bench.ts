/**
 * Issue 21's numbers: sequential write and read and a small-file workload on a volume against the sandbox's own disk
 * in the same sandbox and run (the raw column is the sandbox disk), and the time to snapshot and to fork a volume
 * holding 1 GiB of random data (128 MiB with --quick). On an ext4 host a volume copy copies its allocated blocks.
 */
import { Sandbox, Volume } from '@burrow/sdk';
import type { Row } from './report.js';
import { summarize, time } from './stats.js';

/** Runs the volume rows on one sandbox with one volume; removes both. */
export async function benchVolumes(
  conn: { apiUrl: string; apiKey: string },
  options: { iterations: number; quick: boolean; log: (message: string) => void },
): Promise<Row[]> {
  const tag = Date.now().toString(36);
  const dataMiB = options.quick ? 128 : 1024;
  const volume = await Volume.create({ ...conn, name: `bench-vol-${tag}`, sizeMiB: dataMiB + 1024 });
  const sandbox = await Sandbox.create({ ...conn, diskMiB: 2048, volumes: [{ name: volume.info.name, path: '/vol' }] });
  const copies: Volume[] = [];
  try {
    const run = async (script: string) => {
      const result = await sandbox.commands.run(script, { timeoutMs: 600_000 });
      if (result.exitCode !== 0) throw new Error(`bench command failed: ${result.stderr}`);
    };
    const pair = async (metric: string, target: string, script: (dir: string) => string): Promise<Row> => {
      const ours: number[] = [];
      const raw: number[] = [];
      for (let i = 0; i < options.iterations; i++) {
        ours.push(await time(() => run(script('/vol'))));
        raw.push(await time(() => run(script('/root'))));
      }
      const o = summarize(ours);
      const r = summarize(raw);
      options.log(`volumes: ${metric} volume p50 ${o.p50} ms, own disk p50 ${r.p50} ms`);
      return { metric, ours: o, raw: r, ratio: r.p50 > 0 ? Math.round((o.p50 / r.p50) * 100) / 100 : null, target };
    };
    const rows: Row[] = [
      await pair(
        'volume vs own disk: sequential write 256 MiB, fsync (ms)',
        'volume ≤ 1.5× own disk',
        (dir) => `dd if=/dev/zero of=${dir}/seq bs=1M count=256 conv=fsync 2>/dev/null`,
      ),
      await pair(
        'volume vs own disk: sequential read 256 MiB (ms)',
        'volume ≤ 1.5× own disk',
        (dir) => `cat ${dir}/seq > /dev/null && rm ${dir}/seq`,
      ),
      await pair(
        'volume vs own disk: 200 files of 4 KiB written, then removed (ms)',
        'volume ≤ 2× own disk',
        (dir) =>
          `mkdir -p ${dir}/small && cd ${dir}/small && head -c 4096 /dev/urandom > f && ` +
          'i=0; while [ $i -lt 200 ]; do cp f f$i; i=$((i+1)); done; sync; cd / && rm -rf ' +
          `${dir}/small`,
      ),
    ];
    options.log(`volumes: writing ${dataMiB} MiB of random data for the copy rows`);
    await run(`head -c ${dataMiB}M /dev/urandom > /vol/data && sync`);
    const snap: number[] = [];
    const fork: number[] = [];
    for (let i = 0; i < options.iterations; i++) {
      snap.push(await time(async () => copies.push(await volume.snapshot(`bench-snap-${tag}-${i}`))));
      fork.push(await time(async () => copies.push(await volume.fork(`bench-fork-${tag}-${i}`))));
    }
    const method = copies[0]?.info.lineage.copyMethod ?? 'unknown';
    rows.push(
      {
        metric: `volume snapshot, ${dataMiB} MiB of data (${method}) (ms)`,
        ours: summarize(snap),
        raw: null,
        ratio: null,
        target: 'measured',
      },
      {
        metric: `volume fork, ${dataMiB} MiB of data (${method}) (ms)`,
        ours: summarize(fork),
        raw: null,
        ratio: null,
        target: 'measured',
      },
    );
    options.log(`volumes: snapshot p50 ${summarize(snap).p50} ms, fork p50 ${summarize(fork).p50} ms (${method})`);
    return rows;
  } finally {
    await sandbox.delete().catch(() => undefined);
    for (const copy of copies) await copy.delete().catch(() => undefined);
    await volume.delete({ force: true }).catch(() => undefined);
  }
}
