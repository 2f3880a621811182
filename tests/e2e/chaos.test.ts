/**
 * Chaos, end to end: a seeded random sequence of operations through the SDK on a REAL server process (real runsc,
 * real SQLite): create, exec, file write, pause, resume, fork, stop, start, snapshot, reset, delete, on at most 4
 * live sandboxes. Every 8–15 operations something is killed with SIGKILL: the server process (idle, or while an
 * operation is in flight, after 0–300 ms), or the sentry or gofer of a random running sandbox (found by PID in its
 * pids cgroup), or of the sandbox an operation in flight works on (after 0–300 ms). The server is restarted on the same data dir, and after the reconciler settles:
 *
 * - no row is in a transitional state, every `running` row has a running runsc container with a live sentry and
 *   gofer, every snapshot has its blob and every blob its snapshot, and nothing on the host is left that no row
 *   explains (containers, mounts, loop devices, cgroups, directories, images);
 * - NO LOST FILE: every write the API acknowledged reads back byte-exact in every sandbox that still exists, in
 *   ANY state but deleted (a sandbox whose sentry or gofer was killed ends `error`, its host runtime released and
 *   its disk kept: it is started again; paused ones are resumed, stopped ones started). A fork child holds its parent's files at the fork, a reset the template's
 *   (none) or the snapshot's. An operation a kill interrupted may have happened or not: both outcomes are accepted.
 *
 * At the end everything is deleted through the API and the host must hold nothing of this instance, and no snapshot
 * blob. The seed is printed; `BURROW_CHAOS_SEED=<seed>` replays the same operation sequence (timings still vary),
 * `BURROW_CHAOS_OPS` sets the number of operations (default 100), `BURROW_CHAOS_LOG=1` prints the op log at the
 * end. A failure prints the seed and the op log.
 */
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type ConnectionOptions, Sandbox, Snapshots } from '@burrow/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runtimeProcesses } from '../../packages/runtime-gvisor/src/host-plumbing.js';
import { RunscCli } from '../../packages/runtime-gvisor/src/runsc-cli.js';
import {
  hostProblems,
  instanceCgroupName,
  isAlive,
  removeDataDir,
  type ServerProcess,
  setupDataDir,
  startServerProcess,
  stopServerProcess,
} from './server-process.js';

const SEED = Number(process.env.BURROW_CHAOS_SEED ?? Math.floor(Math.random() * 2 ** 31));
const OPS = Number(process.env.BURROW_CHAOS_OPS ?? 100);
const MAX_LIVE = 4;
const RESOURCES = { memoryMiB: 128, diskMiB: 128, timeoutMs: null };

/** Path → sha256 of every acknowledged write. */
type FileModel = Map<string, string>;

/** What the test knows of one sandbox: its files are exactly one of `candidates` (several after an interrupted reset). */
interface Tracked {
  id: string;
  candidates: FileModel[];
}

/** mulberry32: a small seeded PRNG, so a seed replays the same choices. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const random = prng(SEED);
const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
const between = (low: number, high: number) => low + Math.floor(random() * (high - low + 1));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const sha = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

let dataDir = '';
let adminKey = '';
let server: ServerProcess | null = null;
const tracked = new Map<string, Tracked>();
/**
 * Acknowledged snapshots: id → the files they hold (candidates of the sandbox at the snapshot), whether memory,
 * and, for an unnamed one, the sandbox whose deletion deletes it too.
 */
const snapshots = new Map<string, { candidates: FileModel[]; memory: boolean; deletedWith: string | null }>();
/** Parent files at each fork started, by parent id, to adopt children whose response a kill lost. */
const forkParents = new Map<string, FileModel[]>();
const opLog: string[] = [];
/** Operations that failed with no kill to explain it. */
const unexplained: string[] = [];
let fileCounter = 0;
let serverKills = 0;
let runscKills = 0;

const log = (line: string) => opLog.push(`${new Date().toISOString().slice(11, 23)} ${line}`);
const conn = (): ConnectionOptions => ({ apiUrl: server?.url ?? 'http://127.0.0.1:1', apiKey: adminKey });
const diagnostics = () =>
  `seed ${SEED} (replay: BURROW_CHAOS_SEED=${SEED})\nop log:\n${opLog.slice(-200).join('\n')}\nserver stderr:\n${server?.log() ?? ''}`;
const copy = (models: FileModel[]) => models.map((m) => new Map(m));

async function startServer(): Promise<void> {
  server = await startServerProcess({ dataDir });
  log(`server up at ${server.url}`);
}

/** Every sandbox row, in every state but deleted. */
async function listRows(): Promise<Map<string, { state: string; parentId: string | null }>> {
  const rows = new Map<string, { state: string; parentId: string | null }>();
  let cursor: string | undefined;
  do {
    const page = await Sandbox.list({ ...conn(), limit: 200, ...(cursor ? { cursor } : {}) });
    for (const s of page.items) rows.set(s.id, { state: s.info.state, parentId: s.info.lineage.parentId });
    cursor = page.nextCursor ?? undefined;
  } while (cursor !== undefined);
  return rows;
}

/** Host pids (sentry `boot`, `gofer`) of a sandbox, from its pids cgroup. */
async function runscPids(id: string): Promise<Array<{ pid: number; role: 'sentry' | 'gofer' }>> {
  const cgroup = join('/sys/fs/cgroup/pids/burrow', instanceCgroupName(dataDir), id);
  const found: Array<{ pid: number; role: 'sentry' | 'gofer' }> = [];
  for (const { pid, role } of await runtimeProcesses(cgroup)) if (role !== 'other') found.push({ pid, role });
  if (found.length === 0) {
    const state = await new RunscCli('runsc', join(dataDir, 'runsc'), 'systrap').state(id);
    if (state !== null && state.pid > 0) found.push({ pid: state.pid, role: 'sentry' });
  }
  return found;
}

type Op = { name: string; id?: string; run: () => Promise<void> };

/** A deleted sandbox: out of the model, with its unnamed snapshots (deleted with it). */
function forget(id: string): void {
  tracked.delete(id);
  for (const [snapId, snap] of snapshots) if (snap.deletedWith === id) snapshots.delete(snapId);
}

/** Choose the next operation from the model and the sandbox states the API reports. */
async function chooseOp(): Promise<Op> {
  const rows = await listRows();
  const live = [...tracked.keys()].filter((id) => rows.has(id));
  if (live.length === 0 || (live.length < MAX_LIVE && random() < 0.12)) {
    return {
      name: 'create',
      run: async () => {
        const s = await Sandbox.create({ ...conn(), ...RESOURCES });
        tracked.set(s.id, { id: s.id, candidates: [new Map()] });
        log(`  created ${s.id}`);
      },
    };
  }
  const id = pick(live);
  const state = rows.get(id)?.state ?? 'unknown';
  const model = tracked.get(id) as Tracked;
  const handle = async () => Sandbox.get(id, conn());
  const ops: Record<string, () => Promise<void>> = {
    write: async () => {
      const path = `/root/chaos/f${++fileCounter}.bin`;
      const bytes = new Uint8Array(between(1, 96 * 1024));
      for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(random() * 256);
      const s = await handle();
      await s.files.mkdir('/root/chaos').catch(() => undefined);
      await s.files.write(path, bytes);
      for (const m of model.candidates) m.set(path, sha(bytes));
    },
    exec: async () => {
      const s = await handle();
      const result = await s.commands.run('echo ok && ls /root/chaos 2>/dev/null | wc -l', { timeoutMs: 30_000 });
      if (result.exitCode !== 0 || !result.stdout.startsWith('ok')) throw new Error(`exec: ${JSON.stringify(result)}`);
    },
    pause: async () => void (await (await handle()).pause()),
    resume: async () => void (await (await handle()).resume()),
    stop: async () => void (await (await handle()).stop()),
    start: async () => void (await (await handle()).start()),
    fork: async () => {
      const count = Math.min(between(1, 2), MAX_LIVE - live.length);
      forkParents.set(id, copy(model.candidates));
      const children = await (await handle()).fork({ count });
      for (const c of children) tracked.set(c.id, { id: c.id, candidates: copy(model.candidates) });
      log(`  forked ${children.map((c) => c.id).join(' ')}`);
    },
    snapshot: async () => {
      const memory = state !== 'stopped' && random() < 0.6;
      const name = random() < 0.5 ? `chaos-${++fileCounter}` : undefined;
      const files = copy(model.candidates);
      const snap = await (await handle()).snapshots.create({ memory, ...(name ? { name } : {}) });
      snapshots.set(snap.id, { candidates: files, memory, deletedWith: name ? null : id });
      log(`  snapshot ${snap.id} ${name ?? '(unnamed)'} memory=${memory}`);
    },
    reset: async () => {
      const known = [...snapshots.entries()];
      const before = copy(model.candidates);
      if (known.length > 0 && random() < 0.6) {
        const [snapId, snap] = pick(known);
        const memory = snap.memory && random() < 0.5;
        // Until the API answers, the files are the old ones or the snapshot's.
        model.candidates = [...before, ...copy(snap.candidates)];
        log(`  reset to ${snapId} memory=${memory}`);
        await (await handle()).reset({ to: 'snapshot', snapshot: snapId, memory });
        model.candidates = copy(snap.candidates);
      } else {
        model.candidates = [...before, new Map()];
        await (await handle()).reset({ to: 'template' });
        model.candidates = [new Map()];
      }
    },
    delete: async () => {
      await (await handle()).delete();
      forget(id);
    },
  };
  const byState: Record<string, string[]> = {
    running: [
      'write',
      'write',
      'write',
      'write',
      'exec',
      'exec',
      'pause',
      'pause',
      'stop',
      'fork',
      'snapshot',
      'reset',
      'delete',
    ],
    paused: ['resume', 'resume', 'write', 'exec', 'snapshot', 'stop', 'reset', 'delete'],
    stopped: ['start', 'start', 'snapshot', 'reset', 'delete'],
    error: ['stop', 'delete'],
  };
  let choices = byState[state] ?? ['delete'];
  if (live.length >= MAX_LIVE) choices = choices.filter((c) => c !== 'fork');
  if (live.length <= 1) choices = choices.filter((c) => c !== 'delete');
  const name = pick(choices.length > 0 ? choices : ['exec']);
  return { name: `${name} ${id} (${state})`, id, run: ops[name] as () => Promise<void> };
}

/** Run one op; a failure is logged and, unless a kill explains it, counted as unexplained. */
async function runOp(op: Op, killExplains: boolean): Promise<void> {
  const started = Date.now();
  try {
    await op.run();
    log(`${op.name}: ok ${Date.now() - started} ms`);
  } catch (error) {
    const message = `${(error as Error).name}: ${(error as Error).message}`.slice(0, 300);
    log(`${op.name}: FAILED ${Date.now() - started} ms ${message}`);
    if (!killExplains) unexplained.push(`${op.name}: ${message}`);
  }
}

/** SIGKILL the server process; with `during`, while that op is in flight. Then restart it. */
async function killServer(during: Op | null): Promise<void> {
  const current = server as ServerProcess;
  let inFlight: Promise<void> = Promise.resolve();
  if (during !== null) {
    const delayMs = between(0, 300);
    log(`kill -9 server ${delayMs} ms into: ${during.name}`);
    inFlight = runOp(during, true);
    await sleep(delayMs);
  } else {
    log('kill -9 server (idle)');
  }
  current.child.kill('SIGKILL');
  await current.exited;
  await Promise.race([inFlight, sleep(60_000)]);
  serverKills += 1;
  await startServer();
}

/** SIGKILL the sentry or the gofer of a random running sandbox. */
async function killRunsc(target?: string): Promise<boolean> {
  const rows = await listRows();
  const running = [...rows.entries()].filter(([, r]) => r.state === 'running').map(([id]) => id);
  const targetPids = target === undefined ? [] : await runscPids(target);
  if (running.length === 0 && targetPids.length === 0) return false;
  const id = targetPids.length > 0 ? (target as string) : pick(running);
  const pids = targetPids.length > 0 ? targetPids : await runscPids(id);
  const wanted = pick(['sentry', 'gofer'] as const);
  const victim = pids.find((p) => p.role === wanted) ?? pids[0];
  if (victim === undefined) return false;
  log(`kill -9 ${victim.role} pid ${victim.pid} of ${id}`);
  process.kill(victim.pid, 'SIGKILL');
  runscKills += 1;
  // Until it is reaped, runsc still reports the sandbox running.
  for (let i = 0; i < 100 && (await readFile(`/proc/${victim.pid}/stat`, 'utf8').catch(() => null)) !== null; i++)
    await sleep(50);
  return true;
}

/** Snapshot blobs without a snapshot, snapshots without a blob, staging left over. */
async function snapshotProblems(): Promise<string[]> {
  const listed = new Set((await Snapshots.connect(conn()).list()).map((snap) => snap.id));
  const blobs = await readdir(join(dataDir, 'snapshots')).catch(() => [] as string[]);
  const problems: string[] = [];
  for (const name of blobs) {
    if (name === '.staging') {
      const staged = await readdir(join(dataDir, 'snapshots', name));
      if (staged.length > 0) problems.push(`snapshot staging left: ${staged.join(' ')}`);
    } else if (!listed.has(name)) problems.push(`snapshot blob ${name} without a snapshot`);
  }
  for (const id of listed) if (!blobs.includes(id)) problems.push(`snapshot ${id} without a blob`);
  return problems;
}

const TRANSITIONAL = ['creating', 'pausing', 'resuming', 'stopping', 'deleting'];

/**
 * Wait until no row is transitional and the host matches the rows (a `running` row's container must run), then
 * adopt sandboxes a kill made unknown to the model and forget those gone.
 */
async function settle(context: string): Promise<void> {
  const runsc = new RunscCli('runsc', join(dataDir, 'runsc'), 'systrap');
  let problems: string[] = [];
  const deadline = Date.now() + 90_000;
  while (Date.now() < deadline) {
    const rows = await listRows();
    problems = [];
    for (const [id, row] of rows) {
      if (TRANSITIONAL.includes(row.state)) problems.push(`${id}: row ${row.state}`);
      if (row.state === 'running') {
        const observed = await runsc.state(id);
        if (observed?.status !== 'running') problems.push(`${id}: row running, runsc ${observed?.status ?? 'none'}`);
        else {
          const roles = (await runscPids(id)).map((p) => p.role);
          if (!roles.includes('sentry') || !roles.includes('gofer'))
            problems.push(`${id}: row running, its cgroup holds ${roles.join(' and ') || 'nothing'}`);
        }
      }
    }
    const states = new Map([...rows].map(([id, r]) => [id, r.state] as const));
    problems.push(...(await hostProblems(dataDir, states, { expectContainers: true })));
    problems.push(...(await snapshotProblems()));
    if (problems.length === 0) {
      for (const id of [...tracked.keys()]) if (!rows.has(id)) forget(id);
      for (const [id, row] of rows) {
        if (tracked.has(id)) continue;
        const parent = row.parentId === null ? undefined : forkParents.get(row.parentId);
        tracked.set(id, { id, candidates: parent ? copy(parent) : [new Map()] });
        log(`  adopted ${id}${row.parentId ? ` (fork of ${row.parentId})` : ''}`);
      }
      log(`settled after ${context}: ${[...rows].map(([id, r]) => `${id}=${r.state}`).join(' ')}`);
      return;
    }
    await sleep(500);
  }
  expect.fail(`not settled 90 s after ${context}:\n${problems.join('\n')}\n${diagnostics()}`);
}

/** Bring every tracked sandbox to running and read back every acknowledged file. */
async function expectNoLostFile(context: string): Promise<void> {
  for (const t of tracked.values()) {
    let s = await Sandbox.get(t.id, conn());
    const state = s.info.state;
    try {
      if (state === 'paused') await s.resume();
      if (state === 'stopped' || state === 'error') await s.start();
    } catch (error) {
      expect.fail(
        `${context}: ${t.id} (${state}) could not be brought back to running: ${String(error)}\n${diagnostics()}`,
      );
    }
    s = await Sandbox.get(t.id, conn());
    const mismatches: string[][] = [];
    let matched: FileModel | null = null;
    for (const candidate of t.candidates) {
      const wrong: string[] = [];
      for (const [path, want] of candidate) {
        const got = await s.files.read(path).then(sha, (e: Error) => `${e.name}`);
        if (got !== want) wrong.push(`${path}: ${got} != ${want}`);
      }
      if (wrong.length === 0) {
        matched = candidate;
        break;
      }
      mismatches.push(wrong);
    }
    if (matched !== null) t.candidates = [matched];
    else {
      const listing = await s.files.list('/root/chaos').then(
        (items) => items.map((f) => `${f.path} ${f.sizeBytes}`).join(', '),
        (e: Error) => e.name,
      );
      expect.fail(
        `${context}: LOST FILE in ${t.id} (was ${state}; ${t.candidates.length} candidate file sets; /root/chaos: ${listing}):\n${mismatches.map((m) => m.join('\n')).join('\n--\n')}\n${diagnostics()}`,
      );
    }
    log(`  ${t.id} (was ${state}): ${t.candidates[0]?.size ?? 0} files intact`);
  }
}

beforeAll(async () => {
  console.log(`chaos seed ${SEED} (replay: BURROW_CHAOS_SEED=${SEED}), ${OPS} operations`);
  ({ dataDir, adminKey } = await setupDataDir('burrow-chaos-'));
  await startServer();
}, 180_000);

afterAll(async () => {
  await stopServerProcess(server);
  await removeDataDir(dataDir);
}, 180_000);

describe('chaos: kill -9 of the server and of runsc processes across random operations (real runsc)', () => {
  it(`no lost file, no inconsistent row, no leak (seed ${SEED})`, async () => {
    try {
      await chaos();
    } catch (error) {
      // Whatever failed (an assertion, a call that threw), the seed and the op log say how to get there again.
      console.error(diagnostics());
      throw error;
    }
  }, 600_000);
});

/** The run: operations, kills, settles and checks, then everything deleted and the host checked. */
async function chaos(): Promise<void> {
  let nextKillAt = between(8, 15);
  for (let n = 1; n <= OPS; n++) {
    if (server === null || !isAlive(server)) expect.fail(`the server died on its own\n${diagnostics()}`);
    const op = await chooseOp();
    if (n < nextKillAt) {
      await runOp(op, false);
      continue;
    }
    nextKillAt = n + between(8, 15);
    const kind = random();
    if (kind < 0.35) {
      await killServer(op);
    } else if (kind < 0.55) {
      await runOp(op, false);
      await killServer(null);
    } else if (kind < 0.75) {
      await runOp(op, false);
      if (!(await killRunsc())) await killServer(null);
    } else {
      // The sentry or gofer of the op's own sandbox (else of a random running one) while the op is in flight.
      const delayMs = between(0, 300);
      log(`kill -9 runsc ${delayMs} ms into: ${op.name}`);
      const inFlight = runOp(op, true);
      await sleep(delayMs);
      const killed = await killRunsc(op.id);
      await Promise.race([inFlight, sleep(120_000)]);
      if (!killed) await killServer(null);
    }
    await settle(`op ${n}`);
    await expectNoLostFile(`op ${n}`);
    await settle(`checks after op ${n}`);
  }
  // The end: everything deleted through the API, nothing left on the host.
  for (const id of (await listRows()).keys()) {
    log(`delete ${id} (the end)`);
    await (await Sandbox.get(id, conn())).delete();
  }
  const allSnapshots = Snapshots.connect(conn());
  for (const snap of await allSnapshots.list()) await allSnapshots.delete(snap.id);
  expect(await listRows()).toEqual(new Map());
  let problems: string[] = [];
  for (let attempt = 0; attempt < 40; attempt++) {
    problems = await hostProblems(dataDir, new Map());
    const blobs = (await readdir(join(dataDir, 'snapshots')).catch(() => [] as string[])).filter(
      (n) => n !== '.staging',
    );
    problems.push(...blobs.map((b) => `snapshot blob ${b}`));
    const cgroups = await readdir(join('/sys/fs/cgroup/pids/burrow', instanceCgroupName(dataDir))).catch(() => []);
    problems.push(...cgroups.filter((c) => c.startsWith('sbx_')).map((c) => `cgroup ${c}`));
    if (problems.length === 0) break;
    await sleep(250);
  }
  expect(problems, diagnostics()).toEqual([]);
  console.log(
    `chaos seed ${SEED}: ${OPS} ops, ${serverKills} server kills, ${runscKills} runsc kills, unexplained failures ${unexplained.length}`,
  );
  if (process.env.BURROW_CHAOS_LOG) console.log(opLog.join('\n'));
  expect(unexplained, diagnostics()).toEqual([]);
}
