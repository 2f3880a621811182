/**
 * End to end, real kill -9: a REAL server process (`burrow server`, real runsc, real SQLite) is started with one
 * named crash point armed (`BURROW_TEST_CRASH_AT`, see `crashPoint` in @burrow/runtime), asked to pause, resume or
 * fork, and SIGKILLs itself at that point. It is restarted on the same data dir (armed with the next point) and
 * must leave the sandbox in its old or new state, never half: files byte-exact, the in-memory counter of a
 * background server continuing, fork children all there and running or none left, and nothing on the host that no
 * row owns (containers, mounts, loop devices, cgroups, directories, images).
 *
 * Reset (to a memory snapshot) is crashed after the old disk is deleted and after the new one runs: the restart does
 * the reset again, so the sandbox holds the snapshot's files and memory.
 *
 * An upload killed midway leaves its temporary file in the sandbox's upload temp dir; the restarted server sweeps it.
 *
 * One sandbox is reused across all points, and each restart is armed with the next point, to keep this ~3-5 min.
 */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { isUploadTempName } from '@burrow/runtime';
import { GvisorDriver } from '@burrow/runtime-gvisor';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  hostProblems,
  removeDataDir,
  type ServerProcess,
  setupDataDir,
  startServerProcess,
  stopServerProcess,
} from './server-process.js';

/** A background HTTP server holding a counter in memory; every GET answers the next value. */
const COUNTER_SERVER =
  'python3 -c \'import http.server\nn=0\nclass H(http.server.BaseHTTPRequestHandler):\n  def do_GET(s):\n    global n\n    n+=1\n    b=str(n).encode()\n    s.send_response(200); s.send_header("Content-Length",str(len(b))); s.end_headers(); s.wfile.write(b)\n  def log_message(s,*a): pass\nhttp.server.HTTPServer(("127.0.0.1",8080),H).serve_forever()\'';
const ASK =
  'python3 -c \'import urllib.request;print(urllib.request.urlopen("http://127.0.0.1:8080", timeout=20).read().decode())\'';

let dataDir = '';
let adminKey = '';
let server: ServerProcess | null = null;
/** The sandbox every point works on, the hash of its data file and the counter value last read. */
let sandboxId = '';
let dataSha = '';
let counter = 0;
/** The crash point being checked, for failure messages. */
let step = 'setup';

function startServer(crashAt: string | null): Promise<ServerProcess> {
  return startServerProcess({ dataDir, env: crashAt === null ? {} : { BURROW_TEST_CRASH_AT: crashAt } });
}

async function api(
  method: string,
  path: string,
  body?: object,
): Promise<{ status: number; body: Record<string, unknown> }> {
  if (server === null) throw new Error('no server');
  const current = server;
  const res = await fetch(`${current.url}/v1${path}`, {
    method,
    headers: { authorization: `Bearer ${adminKey}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  }).catch((error: unknown) => {
    throw new Error(
      `${step}: ${method} ${path} failed (server ${current.child.signalCode ?? 'alive'}):\n${current.log()}`,
      {
        cause: error,
      },
    );
  });
  const text = await res.text();
  return { status: res.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

async function exec(id: string, cmd: string): Promise<string> {
  const res = await api('POST', `/sandboxes/${id}/exec`, { cmd });
  expect(res.status, `${step}: ${JSON.stringify(res.body)}\n${server?.log()}`).toBe(200);
  expect(res.body.exitCode, Buffer.from(String(res.body.stderr), 'base64').toString()).toBe(0);
  return Buffer.from(String(res.body.stdout), 'base64').toString().trim();
}

/**
 * Arm `point`'s server, send the request that reaches it, see the server die of SIGKILL there, and restart it on
 * the same data dir armed with `next` (its first reconcile pass finishes or rolls back what was interrupted).
 */
async function crashAt(point: string, request: () => Promise<unknown>, next: string | null): Promise<void> {
  const current = server;
  if (current === null) throw new Error('no server');
  step = point;
  const answered = await request().then(
    () => 'answered',
    () => 'connection lost',
  );
  const exit = await Promise.race([
    current.exited,
    new Promise<{ code: null; signal: null }>((done) => setTimeout(() => done({ code: null, signal: null }), 120_000)),
  ]);
  if (exit.signal === null) current.child.kill('SIGKILL');
  expect({ point, answered, signal: exit.signal }).toEqual({ point, answered: 'connection lost', signal: 'SIGKILL' });
  server = await startServer(next);
}

/** Host resources of every sandbox of this data dir, and the rows; fails on anything no row explains. */
async function expectNoLeaks(): Promise<void> {
  let problems: string[] = [];
  // A pause drops the dead container's record in the background (this host reaps orphans every ~2 s).
  for (let attempt = 0; attempt < 40; attempt++) {
    const listed = await api('GET', '/sandboxes?limit=100');
    const rows = new Map(
      (listed.body.items as Array<{ id: string; state: string }>).map((r) => [r.id, r.state] as const),
    );
    problems = [];
    for (const [id, state] of rows) {
      if (state !== 'running' && state !== 'paused') problems.push(`${id}: row left ${state}`);
    }
    problems.push(...(await hostProblems(dataDir, rows)));
    if (problems.length === 0) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  expect(problems).toEqual([]);
}

/** The sandbox is `allowed`, its file is byte-exact and its counter continues (exec resumes a paused one). */
async function expectIntact(allowed: string[], context: string): Promise<void> {
  const got = await api('GET', `/sandboxes/${sandboxId}`);
  expect(allowed, `${context}: state ${String(got.body.state)}`).toContain(got.body.state);
  await expectNoLeaks();
  expect(await exec(sandboxId, 'sha256sum /root/data.bin | cut -c1-64')).toBe(dataSha);
  counter += 1;
  expect({ context, counter: Number(await exec(sandboxId, ASK)) }).toEqual({ context, counter });
}

beforeAll(async () => {
  ({ dataDir, adminKey } = await setupDataDir('burrow-crash-'));
  server = await startServer(null);
  const created = await api('POST', '/sandboxes', { memoryMiB: 256, diskMiB: 256 });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  sandboxId = String(created.body.id);
  dataSha = await exec(
    sandboxId,
    'head -c 3000000 /dev/urandom > /root/data.bin && sha256sum /root/data.bin | cut -c1-64',
  );
  const started = await api('POST', `/sandboxes/${sandboxId}/commands`, { cmd: COUNTER_SERVER });
  expect(started.status, JSON.stringify(started.body)).toBe(201);
  for (let i = 0; i < 100 && counter === 0; i++) {
    const res = await api('POST', `/sandboxes/${sandboxId}/exec`, { cmd: `${ASK} 2>/dev/null || true` });
    counter = Number(Buffer.from(String(res.body.stdout), 'base64').toString().trim() || 0);
    if (counter === 0) await new Promise((r) => setTimeout(r, 100));
  }
  expect(counter).toBe(1);
}, 300_000);

afterAll(async () => {
  await stopServerProcess(server);
  // Whatever a failed assertion left: every sandbox of this data dir, straight through the driver.
  await removeDataDir(dataDir);
}, 180_000);

describe('kill -9 of a real server during pause, resume and fork (real runsc)', () => {
  const pausePoints = [
    'pause:after-pausing-row',
    'pause:after-checkpoint',
    'pause:after-kill',
    'pause:after-seal',
    'pause:after-runtime',
  ];
  const resumePoints = [
    'resume:after-resuming-row',
    'resume:before-restore',
    'network:before-setup',
    'network:after-setup',
    'resume:after-restore',
    'resume:after-runtime',
  ];
  const forkPoints = [
    'fork:after-child-rows',
    'fork:after-checkpoint',
    'fork:after-first-child',
    'fork:after-children',
    'fork:after-runtime',
    'fork:after-rows',
  ];
  // Within a group each restart is armed with the next point; at a group's end the server restarts unarmed (an
  // auto-resume by the next group's checks must not hit a resume point).
  const nextOf = (group: string[], point: string) => group[group.indexOf(point) + 1] ?? null;
  const restartArmed = async (point: string | null) => {
    server?.child.kill('SIGTERM');
    await server?.exited;
    server = await startServer(point);
  };

  it('upload: a kill -9 mid-upload leaves its temporary file; the restarted server sweeps it, the target untouched', async () => {
    step = 'upload';
    const tempDir = join(new GvisorDriver({ dataDir }).rootDir(sandboxId), '.burrow-tmp');
    const leftovers = () =>
      readdir(tempDir)
        .then((names) => names.filter(isUploadTempName))
        .catch(() => [] as string[]);
    const before = await leftovers();
    const current = server;
    if (current === null) throw new Error('no server');
    // A body that sends 1 MiB and then never ends: the server is killed while it waits for more.
    const upload = new AbortController();
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new Uint8Array(1024 * 1024).fill(7));
      },
    });
    const sent = fetch(`${current.url}/v1/sandboxes/${sandboxId}/files/content?path=/root/upload.bin`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${adminKey}`, 'content-type': 'application/octet-stream' },
      body,
      duplex: 'half',
      signal: upload.signal,
    } as RequestInit).catch(() => 'connection lost');
    let staged: string[] = [];
    for (let i = 0; i < 600 && staged.length === 0; i++) {
      staged = (await leftovers()).filter((n) => !before.includes(n));
      if (staged.length === 0) await new Promise((r) => setTimeout(r, 50));
    }
    expect(staged, 'the upload never staged its temporary file').toHaveLength(1);
    current.child.kill('SIGKILL');
    await current.exited;
    upload.abort();
    await sent;
    expect(await leftovers()).toEqual(expect.arrayContaining(staged));
    server = await startServer(null);
    expect(await leftovers()).toEqual([]);
    expect((await api('GET', `/sandboxes/${sandboxId}/files/stat?path=/root/upload.bin`)).status).toBe(404);
    await expectIntact(['running'], 'upload');
  }, 120_000);

  it('pause: the sandbox ends paused or running, files and memory intact, nothing leaked', async () => {
    await restartArmed(pausePoints[0] ?? null);
    for (const point of pausePoints) {
      await crashAt(point, () => api('POST', `/sandboxes/${sandboxId}/pause`), nextOf(pausePoints, point));
      await expectIntact(['paused', 'running'], point);
    }
  }, 300_000);

  it('resume: the sandbox ends paused or running, files and memory intact, nothing leaked', async () => {
    await restartArmed(resumePoints[0] ?? null);
    for (const point of resumePoints) {
      const paused = await api('POST', `/sandboxes/${sandboxId}/pause`);
      expect(paused.body.state).toBe('paused');
      await crashAt(point, () => api('POST', `/sandboxes/${sandboxId}/resume`), nextOf(resumePoints, point));
      await expectIntact(['paused', 'running'], point);
    }
  }, 300_000);

  it('fork: all children exist and run from the parent state, or none is left; the parent is intact', async () => {
    await restartArmed(forkPoints[0] ?? null);
    for (const point of forkPoints) {
      await crashAt(point, () => api('POST', `/sandboxes/${sandboxId}/fork`, { count: 2 }), nextOf(forkPoints, point));
      const listed = await api('GET', `/sandboxes?parentId=${sandboxId}`);
      const children = listed.body.items as Array<{ id: string; state: string }>;
      expect([0, 2], `${point}: ${children.length} children`).toContain(children.length);
      for (const child of children) {
        expect({ point, state: child.state }).toEqual({ point, state: 'running' });
        expect(await exec(child.id, 'sha256sum /root/data.bin | cut -c1-64')).toBe(dataSha);
        // The counter in the child's memory continues from the parent's at the fork.
        expect(Number(await exec(child.id, ASK))).toBe(counter + 1);
      }
      await expectIntact(['running'], point);
      for (const child of children) expect((await api('DELETE', `/sandboxes/${child.id}`)).status).toBe(204);
      await expectNoLeaks();
    }
  }, 400_000);

  it('reset: a reset to a memory snapshot interrupted anywhere is done again (files and memory of the snapshot)', async () => {
    const resetPoints = ['reset:after-delete', 'reset:after-runtime'];
    const snap = await api('POST', `/sandboxes/${sandboxId}/snapshots`, { name: 'crash-reset', memory: true });
    expect(snap.status, JSON.stringify(snap.body)).toBe(201);
    // The snapshot holds the counter at its value now; every reset to it continues from there.
    const atSnapshot = counter;
    await exec(sandboxId, 'echo after-snapshot > /root/discarded');
    await restartArmed(resetPoints[0] ?? null);
    for (const point of resetPoints) {
      await crashAt(
        point,
        () => api('POST', `/sandboxes/${sandboxId}/reset`, { to: 'snapshot', snapshot: 'crash-reset', memory: true }),
        nextOf(resetPoints, point),
      );
      counter = atSnapshot;
      await expectIntact(['running'], point);
      expect(await exec(sandboxId, 'test -e /root/discarded && echo kept || echo gone')).toBe('gone');
      await exec(sandboxId, 'echo after-snapshot > /root/discarded');
    }
    expect((await api('DELETE', '/snapshots/crash-reset')).status).toBe(204);
  }, 300_000);
});
