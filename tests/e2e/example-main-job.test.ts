/**
 * End to end: README command 1's main job (examples/fork-candidate-fixes) run as a user runs it (`tsx main.ts`)
 * against a REAL server, then checked through the SDK: the dev server kept its pid and in-memory count across the
 * pause, exactly one fork is kept and snapshotted by name, and every other sandbox of the run is gone.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Sandbox, SandboxNotFoundError, Snapshots } from '@burrow/sdk';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './burrow-test-server.js';

const repo = fileURLToPath(new URL('../..', import.meta.url));
let server: TestServer;
let workDir: string;
const connection = () => ({ apiUrl: server.apiUrl, apiKey: server.adminKey });

interface Summary {
  parentId: string;
  devServerPid: number;
  hitsBeforePause: number;
  hitsAfterResume: number;
  pidAfterResume: number;
  candidates: { sandboxId: string; candidate: string; testsPassed: boolean; hitsInFork: number }[];
  kept: { sandboxId: string; candidate: string; snapshotName: string; snapshotId: string };
  quote: string;
  deleted: string[];
  timingsMs: Record<string, number>;
}

beforeAll(async () => {
  server = await startTestServer();
  workDir = mkdtempSync(join(tmpdir(), 'burrow-example-'));
});

afterAll(async () => {
  try {
    if (server !== undefined) {
      for await (const left of Sandbox.listAll({ ...connection(), labels: { example: 'fork-candidate-fixes' } })) {
        await left.delete().catch(() => {});
      }
      const snapshots = Snapshots.connect(connection());
      for (const snap of await snapshots.list()) await snapshots.delete(snap.id).catch(() => {});
    }
  } finally {
    await server?.close();
    if (workDir !== undefined) rmSync(workDir, { recursive: true, force: true });
  }
});

function runExample(summaryPath: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      join(repo, 'node_modules', '.bin', 'tsx'),
      [join(repo, 'examples', 'fork-candidate-fixes', 'main.ts'), summaryPath],
      {
        cwd: repo,
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin', BURROW_URL: server.apiUrl, BURROW_API_KEY: server.adminKey },
        timeout: 240_000,
      },
      (err, stdout, stderr) =>
        resolve({ code: err === null ? 0 : ((err.code as number | undefined) ?? 1), stdout, stderr }),
    );
  });
}

it('prepares a workspace, pauses and resumes it with its dev server, keeps the one passing fork', async () => {
  const summaryPath = join(workDir, 'summary.json');
  const run = await runExample(summaryPath);
  console.info(run.stdout);
  expect(run.stderr).toBe('');
  expect(run.code).toBe(0);
  const summary = JSON.parse(readFileSync(summaryPath, 'utf8')) as Summary;

  // Across the pause: the same process, and its count went on from where it was (3 requests, then the 4th).
  expect(summary.hitsBeforePause).toBe(3);
  expect(summary.pidAfterResume).toBe(summary.devServerPid);
  expect(summary.hitsAfterResume).toBe(4);
  // Each fork holds a copy of that memory: its next request is the 5th.
  expect(summary.candidates.map((c) => c.hitsInFork)).toEqual([5, 5, 5]);
  expect(summary.candidates.filter((c) => c.testsPassed)).toHaveLength(1);
  expect(summary.kept.candidate).toBe('subtract percent / 100');
  // The winner's dev server reloads pricing.py and formats with the installed package.
  expect(summary.quote).toBe('21.60 EUR');

  const kept = await Sandbox.get(summary.kept.sandboxId, connection());
  expect(kept.info.state).toBe('running');
  const tests = await kept.commands.run('python3 -m unittest', { cwd: '/root/shop' });
  expect(tests.exitCode).toBe(0);

  const snapshot = await Snapshots.connect(connection()).get(summary.kept.snapshotName);
  expect(snapshot.id).toBe(summary.kept.snapshotId);
  expect(snapshot.sandboxId).toBe(kept.id);

  const others = [summary.parentId, ...summary.candidates.map((c) => c.sandboxId).filter((id) => id !== kept.id)];
  expect(summary.deleted.sort()).toEqual(others.sort());
  for (const id of others) {
    await expect(Sandbox.get(id, connection())).rejects.toBeInstanceOf(SandboxNotFoundError);
  }
  const left = [];
  for await (const s of Sandbox.listAll({ ...connection(), labels: { example: 'fork-candidate-fixes' } }))
    left.push(s.id);
  expect(left).toEqual([kept.id]);
}, 300_000);
