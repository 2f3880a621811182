/**
 * What Burrow is for, on a real sandbox: an agent prepares a workspace (uploads a shop's Python project, installs
 * its package from a local source tree, starts the dev server, which counts its requests in memory), pauses the
 * sandbox and resumes it with the server still answering and its count intact, then forks three candidate fixes
 * for the failing test, runs them in parallel, keeps the one whose tests pass, snapshots it by name and deletes
 * the rest. Each step prints its wall time.
 *
 * Run: `npx tsx examples/fork-candidate-fixes/main.ts [summary.json]` with a server running (`npx burrow server`)
 * and BURROW_URL / BURROW_API_KEY set (the README's command 1 does all of this). The kept sandbox runs on until its
 * timeout (10 minutes) so you can look around; the snapshot stays until you delete it. The optional argument
 * names a JSON file that receives what happened (ids, counts, timings).
 */
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Sandbox } from '@burrow/sdk';

const here = dirname(fileURLToPath(import.meta.url));
const projectDir = join(here, 'project');
const remoteDir = '/root/shop';
const summaryPath = process.argv[2];
const serverUrl = 'http://127.0.0.1:8000';

/** Three edits of the buggy line in pricing.py; the tests decide which one is right. */
const buggyLine = '    return amount + amount * Decimal(percent) / 100\n';
const candidates = [
  { name: 'scale by (1 - percent)', line: '    return amount * (1 - Decimal(percent))\n' },
  { name: 'subtract percent / 100', line: '    return amount - amount * Decimal(percent) / 100\n' },
  { name: 'divide by (1 + percent / 100)', line: '    return amount / (1 + Decimal(percent) / 100)\n' },
];

interface HitCount {
  hits: number;
  pid: number;
}

const timingsMs: Record<string, number> = {};

async function step<T>(title: string, fn: () => Promise<T>): Promise<T> {
  const started = performance.now();
  process.stdout.write(`• ${title} ... `);
  const result = await fn();
  const elapsedMs = Math.round(performance.now() - started);
  timingsMs[title] = elapsedMs;
  process.stdout.write(`${elapsedMs} ms\n`);
  return result;
}

/** Asks the dev server inside the sandbox for its request count (each call adds one). */
async function hits(sandbox: Sandbox): Promise<HitCount> {
  const { stdout } = await sandbox.commands.run(['curl', '-fsS', `${serverUrl}/hits`], { check: true });
  return JSON.parse(stdout) as HitCount;
}

async function projectFiles(dir: string): Promise<{ path: string; data: Uint8Array }[]> {
  const files: { path: string; data: Uint8Array }[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile()) continue;
    const local = join(entry.parentPath, entry.name);
    files.push({ path: `${remoteDir}/${relative(projectDir, local)}`, data: await readFile(local) });
  }
  return files;
}

const parent = await step('create sandbox (template base)', () =>
  Sandbox.create({
    template: 'base',
    cpuCount: 1,
    memoryMiB: 512,
    timeoutMs: 600_000,
    labels: { example: 'fork-candidate-fixes' },
  }),
);
console.log(`  sandbox ${parent.id}`);
const created: Sandbox[] = [parent];
let kept: Sandbox | undefined;
try {
  const files = await projectFiles(projectDir);
  await step(`upload the project (${files.length} files)`, () => parent.files.writeMany(files));

  await step('install its package shopfmt from the local source tree', () =>
    parent.commands.run(
      'pip install --no-index --no-build-isolation --break-system-packages --disable-pip-version-check ./vendor/shopfmt',
      { cwd: remoteDir, timeoutMs: 120_000, check: true },
    ),
  );

  const devServer = await step('start the dev server in the background', async () => {
    const handle = await parent.commands.run(['python3', 'server.py'], { background: true, cwd: remoteDir });
    const ready = `for i in $(seq 100); do curl -fsS ${serverUrl}/health >/dev/null 2>&1 && exit 0; sleep 0.1; done; exit 1`;
    const probe = await parent.commands.run(ready);
    if (probe.exitCode !== 0) throw new Error('the dev server did not answer within 10 s');
    return handle;
  });
  await hits(parent);
  await hits(parent);
  const beforePause = await hits(parent);
  console.log(`  dev server pid ${devServer.pid} has served ${beforePause.hits} requests (a count held in memory)`);

  const failing = await step('run the tests', () => parent.commands.run('python3 -m unittest', { cwd: remoteDir }));
  if (failing.exitCode === 0) throw new Error('expected the tests to fail: the project ships a bug');
  console.log(`  ${lastLine(failing.stderr)}`);

  await step('pause (processes and memory saved with the disk)', () => parent.pause());
  await step('resume', () => parent.resume());
  const afterResume = await hits(parent);
  console.log(`  the same server (pid ${afterResume.pid}) answers: request ${afterResume.hits}`);
  if (afterResume.pid !== beforePause.pid || afterResume.hits !== beforePause.hits + 1) {
    throw new Error(`the dev server lost its state: ${JSON.stringify({ beforePause, afterResume })}`);
  }

  const forks = await step(`fork ${candidates.length} candidates`, () => parent.fork({ count: candidates.length }));
  created.push(...forks);
  const source = await parent.files.readText(`${remoteDir}/pricing.py`);
  if (!source.includes(buggyLine)) throw new Error('pricing.py does not hold the line the candidates replace');

  const results = await step('try each candidate fix in its own fork, in parallel', () =>
    Promise.all(
      forks.map(async (fork, i) => {
        const candidate = candidates[i] as (typeof candidates)[number];
        const started = performance.now();
        const inFork = await hits(fork);
        await fork.files.write(`${remoteDir}/pricing.py`, source.replace(buggyLine, candidate.line));
        const tests = await fork.commands.run('python3 -m unittest', { cwd: remoteDir });
        const elapsedMs = Math.round(performance.now() - started);
        return { fork, candidate: candidate.name, passed: tests.exitCode === 0, hitsInFork: inFork.hits, elapsedMs };
      }),
    ),
  );
  for (const r of results) {
    const verdict = r.passed ? 'tests pass' : 'tests fail';
    console.log(
      `  ${r.fork.id} «${r.candidate}»: its server copy answers request ${r.hitsInFork}; ${verdict} (${r.elapsedMs} ms)`,
    );
  }
  const winner = results.find((r) => r.passed);
  if (winner === undefined) throw new Error('no candidate made the tests pass');
  kept = winner.fork;

  const snapshotName = `shop-fixed-${kept.id.toLowerCase().replace(/[^a-z0-9]/g, '-')}`;
  const snapshot = await step(`snapshot the winner as ${snapshotName}`, () =>
    (kept as Sandbox).snapshots.create({ name: snapshotName }),
  );
  const quote = await kept.commands.run(['curl', '-fsS', `${serverUrl}/quote`], { check: true });
  console.log(`  the winner's dev server quotes the sample order at ${quote.stdout.trim()}`);
  const rest = created.filter((s) => s !== kept);
  await step(`delete the other ${rest.length} sandboxes (the parent and the losing forks)`, () =>
    Promise.all(rest.map((s) => s.delete())),
  );
  console.log(`  kept ${kept.id} «${winner.candidate}» and snapshot ${snapshot.id}`);

  if (summaryPath !== undefined) {
    const summary = {
      parentId: parent.id,
      devServerPid: devServer.pid,
      hitsBeforePause: beforePause.hits,
      hitsAfterResume: afterResume.hits,
      pidAfterResume: afterResume.pid,
      candidates: results.map((r) => ({
        sandboxId: r.fork.id,
        candidate: r.candidate,
        testsPassed: r.passed,
        hitsInFork: r.hitsInFork,
      })),
      kept: { sandboxId: kept.id, candidate: winner.candidate, snapshotName, snapshotId: snapshot.id },
      quote: quote.stdout.trim(),
      deleted: rest.map((s) => s.id),
      timingsMs,
    };
    await writeFile(summaryPath, `${JSON.stringify(summary, null, 2)}\n`);
  }
  console.log(`done: one fix kept out of ${candidates.length}. Try:`);
  console.log(`  npx burrow exec ${kept.id} -- sh -c 'cd ${remoteDir} && python3 -m unittest -v'`);
  console.log(`  npx burrow sandbox create --from-snapshot ${snapshotName}   # the fixed workspace, server running`);
} catch (err) {
  // A failed run leaves nothing behind: every sandbox it made goes.
  await Promise.all(created.map((s) => s.delete().catch(() => {})));
  throw err;
}

function lastLine(text: string): string {
  return text.trimEnd().split('\n').at(-1) ?? '';
}
