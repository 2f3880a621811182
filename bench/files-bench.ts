/**
 * Issue 5's numbers: upload and download MB/s of one large file (2 GiB; 256 MiB with --quick) streamed through the
 * server, and of a tree of 10,000 small files as a tar; against host `cp` and `tar | tar` on the same disk in the
 * same run.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { Sandbox } from '@burrow/sdk';
import { create as tarCreate, extract as tarExtract } from 'tar';
import type { ExecRow } from './exec-bench.js';
import { summarize, time } from './stats.js';

const TREE_FILES = 10_000;
const TREE_FILE_BYTES = 1024;

/** Runs the file transfer rows on one sandbox; host baselines use `workDir`. */
export async function benchFiles(
  conn: { apiUrl: string; apiKey: string },
  options: { quick: boolean; workDir: string; log: (message: string) => void },
): Promise<ExecRow[]> {
  const bigBytes = options.quick ? 256 * 1024 * 1024 : 2 * 1024 * 1024 * 1024;
  const samples = options.quick ? 1 : 3;
  const work = join(options.workDir, 'files-bench');
  await mkdir(work, { recursive: true });
  const bigFile = join(work, 'big.bin');
  await writeBigFile(bigFile, bigBytes);
  const tree = join(work, 'tree');
  await writeTree(tree);
  const sandbox = await Sandbox.create({
    ...conn,
    template: 'base',
    diskMiB: Math.ceil((bigBytes * 2.5) / 2 ** 20) + 1024,
    timeoutMs: 3_600_000,
  });
  const up: number[] = [];
  const down: number[] = [];
  const cp: number[] = [];
  const treeUp: number[] = [];
  const treeDown: number[] = [];
  const hostTar: number[] = [];
  try {
    for (let i = 0; i < samples; i++) {
      options.log(`files: large file ${i + 1}/${samples} (${bigBytes} bytes)`);
      up.push(await time(() => sandbox.files.write('/root/big.bin', createReadStream(bigFile))));
      const copy = join(work, 'big.down');
      down.push(
        await time(async () => {
          const { stream } = await sandbox.files.readStream('/root/big.bin');
          await pipeline(Readable.fromWeb(stream as WebReadableStream<Uint8Array>), createWriteStream(copy));
        }),
      );
      if ((await stat(copy)).size !== bigBytes) throw new Error('downloaded size differs');
      await rm(copy);
      cp.push(await time(async () => execFileSync('cp', [bigFile, join(work, 'big.cp')])));
      await rm(join(work, 'big.cp'));
      await sandbox.files.remove('/root/big.bin');

      options.log(`files: tree of ${TREE_FILES} files ${i + 1}/${samples}`);
      treeUp.push(
        await time(async () => {
          const result = await sandbox.files.upload('/root/tree', Readable.from(tarCreate({ cwd: tree }, ['.'])));
          if (result.files !== TREE_FILES) throw new Error(`extracted ${result.files} files`);
        }),
      );
      const treeCopy = join(work, 'tree.down');
      await mkdir(treeCopy);
      treeDown.push(
        await time(async () => {
          const tar = Readable.fromWeb((await sandbox.files.download('/root/tree')) as WebReadableStream<Uint8Array>);
          await pipeline(tar, tarExtract({ cwd: treeCopy }) as unknown as Writable);
        }),
      );
      await rm(treeCopy, { recursive: true });
      await sandbox.files.remove('/root/tree', { recursive: true });
      const hostCopy = join(work, 'tree.host');
      await mkdir(hostCopy);
      hostTar.push(
        await time(async () =>
          execFileSync('sh', ['-c', `tar -cf - -C '${tree}' . | tar -xf - -C '${hostCopy}'`], { stdio: 'ignore' }),
        ),
      );
      await rm(hostCopy, { recursive: true });
    }
  } finally {
    await sandbox.delete().catch(() => undefined);
    await rm(work, { recursive: true, force: true });
  }
  const mbps = (bytes: number, ms: number) => Math.round(bytes / 1e6 / (ms / 1000));
  const big = `${Math.round(bigBytes / 2 ** 20)} MiB`;
  const rowOf = (metric: (o: number, r: number) => string, ours: number[], raw: number[], target: string) => {
    const o = summarize(ours);
    const r = summarize(raw);
    return { metric: metric(o.p50, r.p50), ours: o, raw: r, ratio: Math.round((o.p50 / r.p50) * 100) / 100, target };
  };
  const treeBytes = TREE_FILES * TREE_FILE_BYTES;
  return [
    rowOf(
      (o, r) => `upload one ${big} file, streamed (ours ${mbps(bigBytes, o)} MB/s; host cp ${mbps(bigBytes, r)} MB/s)`,
      up,
      cp,
      '≥ 300 MB/s (issue 5)',
    ),
    rowOf(
      (o, r) =>
        `download one ${big} file, streamed (ours ${mbps(bigBytes, o)} MB/s; host cp ${mbps(bigBytes, r)} MB/s)`,
      down,
      cp,
      '≥ 300 MB/s (issue 5)',
    ),
    rowOf(
      (o) =>
        `upload a tree of ${TREE_FILES} × 1 KiB files as tar (ours ${mbps(treeBytes, o)} MB/s; raw = host tar|tar)`,
      treeUp,
      hostTar,
      '≤ 5000 ms (issue 5)',
    ),
    rowOf(
      (o) =>
        `download a tree of ${TREE_FILES} × 1 KiB files as tar (ours ${mbps(treeBytes, o)} MB/s; raw = host tar|tar)`,
      treeDown,
      hostTar,
      '≤ 5000 ms (issue 5)',
    ),
  ];
}

async function writeBigFile(path: string, sizeBytes: number): Promise<void> {
  const chunk = randomBytes(4 * 1024 * 1024);
  const out = createWriteStream(path);
  await pipeline(
    Readable.from(
      (function* () {
        for (let left = sizeBytes; left > 0; left -= chunk.length)
          yield chunk.subarray(0, Math.min(left, chunk.length));
      })(),
    ),
    out,
  );
}

async function writeTree(dir: string): Promise<void> {
  for (let d = 0; d < 100; d++) {
    const sub = join(dir, `d${d}`);
    await mkdir(sub, { recursive: true });
    for (let f = 0; f < TREE_FILES / 100; f++) await writeFile(join(sub, `f${f}.txt`), randomBytes(TREE_FILE_BYTES));
  }
}
