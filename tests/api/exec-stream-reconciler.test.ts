import { ExecServerFrameSchema } from '@burrow/contract';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { WebSocket } from 'ws';
import { type Harness, startHarness } from './api-harness.js';

let h: Harness;
let base = '';
beforeAll(async () => {
  h = await startHarness();
  base = (await h.burrow.app.listen({ host: '127.0.0.1', port: 0 })).replace('http', 'ws');
});
afterAll(async () => {
  await h?.close();
});

async function create(body: Record<string, unknown> = {}): Promise<string> {
  const res = await h.burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: h.admin, payload: body });
  expect(res.statusCode, res.body).toBe(201);
  return res.json().id;
}

interface Session {
  stdout: Buffer[];
  stderr: Buffer[];
  frames: unknown[];
  closed: Promise<void>;
  ws: WebSocket;
}

function connect(id: string, headers: Record<string, string> = h.admin): Session {
  const ws = new WebSocket(`${base}/v1/sandboxes/${id}/exec/stream`, { headers });
  const s: Session = { stdout: [], stderr: [], frames: [], ws, closed: new Promise((r) => ws.on('close', () => r())) };
  ws.on('message', (data: Buffer, isBinary) => {
    if (isBinary) (data[0] === 1 ? s.stdout : s.stderr).push(data.subarray(1));
    else s.frames.push(ExecServerFrameSchema.parse(JSON.parse(data.toString())));
  });
  ws.on('error', () => undefined);
  return s;
}
const opened = (ws: WebSocket) =>
  new Promise<void>((resolve, reject) => {
    ws.on('open', () => resolve());
    ws.on('unexpected-response', (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
  });

describe('exec stream (WebSocket)', () => {
  test('stdin in, stdout and stderr out, exit last', async () => {
    const id = await create();
    const s = connect(id);
    await opened(s.ws);
    s.ws.send(JSON.stringify({ type: 'start', request: { cmd: 'cat; echo done >&2; exit 4' } }));
    await new Promise((r) => setTimeout(r, 100));
    s.ws.send(Buffer.concat([Buffer.from([0]), Buffer.from('abc\n')]));
    s.ws.send(JSON.stringify({ type: 'stdin_close' }));
    await s.closed;
    expect(s.frames[0]).toEqual({ type: 'started' });
    expect(s.frames.at(-1)).toMatchObject({ type: 'exit', exitCode: 4, signal: null, timedOut: false });
    expect(Buffer.concat(s.stdout).toString()).toBe('abc\n');
    expect(Buffer.concat(s.stderr).toString()).toBe('done\n');
  });

  test('signal and timeout end the command', async () => {
    const id = await create();
    const a = connect(id);
    await opened(a.ws);
    a.ws.send(JSON.stringify({ type: 'start', request: { cmd: ['sleep', '30'] } }));
    await new Promise((r) => setTimeout(r, 200));
    a.ws.send(JSON.stringify({ type: 'signal', signal: 'SIGTERM' }));
    await a.closed;
    expect(a.frames.at(-1)).toMatchObject({ type: 'exit', signal: 'SIGTERM', exitCode: null });
    const b = connect(id);
    await opened(b.ws);
    b.ws.send(JSON.stringify({ type: 'start', request: { cmd: 'sleep 30', timeoutMs: 200 } }));
    await b.closed;
    expect(b.frames.at(-1)).toMatchObject({ type: 'exit', timedOut: true, signal: 'SIGKILL', exitCode: null });
  });

  test('an exec stream that resumes a paused sandbox records the calling key as the actor', async () => {
    // Found by a new user: `burrow exec` on a paused sandbox logged `resumed` with actor `system` (the start frame
    // arrives in a socket event, outside the request's actor scope), while REST exec named the key.
    const id = await create();
    const paused = await h.burrow.app.inject({ method: 'POST', url: `/v1/sandboxes/${id}/pause`, headers: h.admin });
    expect(paused.statusCode, paused.body).toBe(200);
    const s = connect(id);
    await opened(s.ws);
    s.ws.send(JSON.stringify({ type: 'start', request: { cmd: ['true'] } }));
    await s.closed;
    expect(s.frames.at(-1)).toMatchObject({ type: 'exit', exitCode: 0 });
    await h.burrow.services.events.flush();
    const listed = await h.burrow.app.inject({
      method: 'GET',
      url: `/v1/events?sandboxId=${id}&type=resumed`,
      headers: h.admin,
    });
    expect(listed.statusCode, listed.body).toBe(200);
    const [resumed] = listed.json().items as Array<{ actor: string; reason: string }>;
    expect(resumed).toMatchObject({ actor: expect.stringMatching(/^key_/), reason: 'UserRequest' });
  });

  test('protocol errors and unknown sandboxes end with an error frame; bad keys are refused before upgrade', async () => {
    const id = await create();
    const a = connect(id);
    await opened(a.ws);
    a.ws.send('not json');
    await a.closed;
    expect(a.frames.at(-1)).toMatchObject({ type: 'error', error: { code: 'invalid_request' } });
    // A start frame whose field breaks its rule says which field, not just "not a valid control frame".
    const d = connect(id);
    await opened(d.ws);
    d.ws.send(JSON.stringify({ type: 'start', request: { cmd: ['true'], stdin: 'aGl' } }));
    await d.closed;
    expect(d.frames.at(-1)).toMatchObject({
      type: 'error',
      error: { code: 'invalid_request', message: expect.stringContaining('/request/stdin must be standard base64') },
    });
    const b = connect('sbx_00000000000000000000');
    await opened(b.ws);
    b.ws.send(JSON.stringify({ type: 'start', request: { cmd: 'true' } }));
    await b.closed;
    expect(b.frames.at(-1)).toMatchObject({ type: 'error', error: { code: 'sandbox_not_found' } });
    const c = connect(id, { authorization: 'Bearer bk_nope' });
    await expect(opened(c.ws)).rejects.toThrow('HTTP 401');
    const health = await h.burrow.app.inject({ method: 'GET', url: '/v1/health' });
    expect(health.statusCode).toBe(200);
  });
});

describe('reconciler', () => {
  // Expiry moved to the PolicyEnforcer (lifecycle-api.test.ts); the reconciler repairs, observes and reaps.
  test('finishes interrupted rows, marks vanished containers, reaps orphans', async () => {
    const vanished = await create();
    const healthy = await create();
    const row = await h.burrow.store.sandboxes.getAcrossTenants(healthy);
    if (row === null) throw new Error('row missing');
    // A row a crash left in `creating`, with its host directory.
    const interrupted = 'sbx_ntrrptdrw00000000000'; // a valid id: its events pass the response schema
    await h.burrow.store.sandboxes.insert({ ...row, id: interrupted, state: 'creating', labels: {} });
    await h.driver.create({
      sandboxId: interrupted,
      template: { id: 'x', rootfsDir: '/nonexistent' },
      resources: { cpuCount: 1, memoryMiB: 64, diskMiB: 64 },
      hostname: 'x',
    });
    // Host resources no row owns.
    const orphan = 'sbx_orphan00000000000000';
    await h.driver.create({
      sandboxId: orphan,
      template: { id: 'x', rootfsDir: '/nonexistent' },
      resources: { cpuCount: 1, memoryMiB: 64, diskMiB: 64 },
      hostname: 'x',
    });
    await h.driver.vanish(vanished);
    const report = await h.burrow.reconciler.reconcileOnce();
    expect(report.finished).toEqual([interrupted]);
    expect(report.markedError).toEqual([vanished]);
    expect(report.orphansFound).toEqual([orphan]);
    expect(report.orphansReaped).toEqual([orphan]);
    expect(report.failures).toEqual([]);
    const host = (await h.driver.listHostResources()).sandboxIds;
    for (const gone of [interrupted, orphan]) expect(host).not.toContain(gone);
    expect(host).toContain(healthy);
    expect((await h.burrow.store.sandboxes.getAcrossTenants(vanished))?.state).toBe('error');
    // The repair is the reconciler's, not a user's (a kill -9 mid-create showed `deleted` by `system`, `UserRequest`).
    await h.burrow.services.events.flush();
    const listed = await h.burrow.app.inject({
      method: 'GET',
      url: `/v1/events?sandboxId=${interrupted}&type=deleted`,
      headers: h.admin,
    });
    expect(listed.statusCode, listed.body).toBe(200);
    expect(listed.json().items).toEqual([expect.objectContaining({ actor: 'system:reconciler', reason: 'Reconcile' })]);
    const again = await h.burrow.reconciler.reconcileOnce();
    expect(again).toEqual({
      expired: [],
      finished: [],
      markedError: [],
      orphansFound: [],
      orphansReaped: [],
      released: [],
      failures: [],
    });
  });
});
