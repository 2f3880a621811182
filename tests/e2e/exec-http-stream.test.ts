/**
 * End to end: the streaming exec over plain HTTP (`POST /v1/sandboxes/{id}/exec/stream`) against a REAL server and
 * runsc sandbox: through the SDK on both transports alike (exit codes, exact bytes, stderr, timeouts, stdin, signals,
 * disconnects), and on the wire with node:http (framing, error answers, a client that goes away mid-stream).
 */
import { createHash } from 'node:crypto';
import { type ClientRequest, request as httpRequest, type IncomingMessage } from 'node:http';
import {
  EXEC_FRAMES_MEDIA_TYPE,
  ExecFrameChannel,
  ExecFrameReader,
  execFrame,
  execFrameHeader,
} from '@burrow/contract/wire';
import { type ExecEvent, type ExecTransportKind, Sandbox, SandboxNotFoundError } from '@burrow/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './burrow-test-server.js';

const RUN_ID = `xhs-${Date.now().toString(36)}`;
let server: TestServer;
let sandbox: Sandbox;
const connection = () => ({ apiUrl: server.apiUrl, apiKey: server.adminKey });

beforeAll(async () => {
  server = await startTestServer();
  sandbox = await Sandbox.create({ ...connection(), labels: { e2e: RUN_ID } });
  console.info(`exec-http-stream e2e: run ${RUN_ID}, sandbox ${sandbox.id}`);
});

afterAll(async () => {
  try {
    if (server !== undefined) {
      for await (const left of Sandbox.listAll({ ...connection(), labels: { e2e: RUN_ID } })) {
        await left.delete().catch(() => {});
      }
    }
  } finally {
    await server?.close();
  }
});

async function drain(stream: AsyncIterable<ExecEvent>): Promise<{ stdout: Buffer; stderr: Buffer; exit: ExecEvent }> {
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  let exit: ExecEvent | undefined;
  for await (const event of stream) {
    if (event.type === 'stdout') stdout.push(Buffer.from(event.data));
    else if (event.type === 'stderr') stderr.push(Buffer.from(event.data));
    else exit = event;
  }
  if (exit === undefined) throw new Error('no exit event');
  return { stdout: Buffer.concat(stdout), stderr: Buffer.concat(stderr), exit };
}

describe.each<ExecTransportKind>(['http', 'websocket'])('commands.stream over %s', (transport) => {
  it('exit codes, stderr apart from stdout, and exact bytes (NUL, 0xff)', async () => {
    const out = await drain(
      sandbox.commands.stream(['sh', '-c', "printf 'a\\000b\\377'; echo oops >&2; exit 42"], { transport }),
    );
    expect(out.stdout).toEqual(Buffer.from([0x61, 0, 0x62, 0xff]));
    expect(out.stderr.toString()).toBe('oops\n');
    expect(out.exit).toMatchObject({ type: 'exit', exitCode: 42, signal: null, timedOut: false, reason: null });
    const killed = await drain(sandbox.commands.stream(['sh', '-c', 'kill -TERM $$'], { transport }));
    expect(killed.exit).toMatchObject({ exitCode: null, signal: 'SIGTERM' });
  });

  it('16 MiB of binary output arrives byte-exact', async () => {
    const path = `/tmp/big-${transport}`;
    const out = await drain(
      sandbox.commands.stream(`head -c 16777216 /dev/urandom | tee ${path}`, { transport, timeoutMs: 120_000 }),
    );
    expect(out.stdout.byteLength).toBe(16 * 1024 * 1024);
    const remote = await sandbox.commands.run(`sha256sum ${path} | cut -d" " -f1; rm ${path}`, { check: true });
    expect(createHash('sha256').update(out.stdout).digest('hex')).toBe(remote.stdout.trim());
  });

  it('a timeout kills the command: timedOut, SIGKILL, no exit code', async () => {
    const t0 = Date.now();
    const out = await drain(sandbox.commands.stream('echo before; sleep 30', { transport, timeoutMs: 1_000 }));
    expect(out.stdout.toString()).toBe('before\n');
    expect(out.exit).toMatchObject({ exitCode: null, signal: 'SIGKILL', timedOut: true });
    expect(Date.now() - t0).toBeLessThan(20_000);
  });

  it('stdin written while it runs, closed, and a signal', async () => {
    const cat = sandbox.commands.stream(['sh', '-c', 'cat; echo "cat ended: $?"'], { transport });
    await cat.started();
    cat.writeStdin('abc\n');
    cat.writeStdin(new Uint8Array([0, 255, 10]));
    cat.closeStdin();
    const out = await drain(cat);
    expect(out.stdout).toEqual(
      Buffer.concat([Buffer.from('abc\n'), Buffer.from([0, 255, 10]), Buffer.from('cat ended: 0\n')]),
    );
    const sleeper = sandbox.commands.stream(['sleep', '30'], { transport });
    await sleeper.started();
    sleeper.kill('SIGINT');
    expect((await drain(sleeper)).exit).toMatchObject({ exitCode: null, signal: 'SIGINT' });
  });

  it('closing the stream leaves the command running unless killOnDisconnect', async () => {
    const kept = `/tmp/kept-${transport}`;
    const killed = `/tmp/killed-${transport}`;
    await sandbox.commands.run(`rm -f ${kept} ${killed}`);
    const a = sandbox.commands.stream(`sleep 1; touch ${kept}`, { transport });
    const b = sandbox.commands.stream(`sleep 1; touch ${killed}`, { transport, killOnDisconnect: true });
    await Promise.all([a.started(), b.started()]);
    a.close();
    b.close();
    await new Promise((r) => setTimeout(r, 2500));
    const ls = await sandbox.commands.run(`ls ${kept} ${killed} 2>/dev/null`);
    expect(ls.stdout).toBe(`${kept}\n`);
  });

  it('a sandbox that no longer exists is SandboxNotFoundError', async () => {
    const gone = await Sandbox.create({ ...connection(), labels: { e2e: RUN_ID } });
    await gone.delete();
    const stream = gone.commands.stream(['true'], { transport });
    await expect(stream.started()).rejects.toBeInstanceOf(SandboxNotFoundError);
    await expect(drain(stream)).rejects.toMatchObject({ code: 'sandbox_not_found' });
  });
});

/** One raw HTTP exec stream: the request (body still open) and, once it came, the answer. */
function openRaw(
  id: string,
  frames: Uint8Array[],
  contentType = EXEC_FRAMES_MEDIA_TYPE,
): {
  request: ClientRequest;
  response: Promise<IncomingMessage>;
} {
  const request = httpRequest(`${server.apiUrl}/v1/sandboxes/${id}/exec/stream`, {
    method: 'POST',
    agent: false,
    headers: {
      authorization: `Bearer ${server.adminKey}`,
      'content-type': contentType,
      'transfer-encoding': 'chunked',
    },
  });
  const response = new Promise<IncomingMessage>((resolve, reject) => {
    request.on('response', resolve);
    request.on('error', reject);
  });
  for (const frame of frames) request.write(frame);
  return { request, response };
}

function readAll(res: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    res.on('data', (chunk: Buffer) => chunks.push(chunk));
    res.on('end', () => resolve(Buffer.concat(chunks)));
    res.on('error', reject);
  });
}

function startFrame(request: Record<string, unknown>, killOnDisconnect = false): Uint8Array {
  return execFrame(ExecFrameChannel.control, JSON.stringify({ type: 'start', request, killOnDisconnect }));
}

function framesOf(body: Buffer): Array<{ channel: number; text: string }> {
  return new ExecFrameReader().push(body).map((f) => ({ channel: f.channel, text: Buffer.from(f.payload).toString() }));
}

describe('POST /v1/sandboxes/{id}/exec/stream on the wire', () => {
  it('answers 200 with started, output and exit frames; the body end is the end of stdin', async () => {
    const { request, response } = openRaw(sandbox.id, [
      startFrame({ cmd: ['sh', '-c', 'cat; exit 3'] }),
      execFrame(ExecFrameChannel.stdin, 'piped'),
    ]);
    request.end();
    const res = await response;
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe(EXEC_FRAMES_MEDIA_TYPE);
    expect(res.headers['x-request-id']).toMatch(/^req_/);
    const frames = framesOf(await readAll(res));
    expect(frames[0]).toEqual({ channel: ExecFrameChannel.control, text: '{"type":"started"}' });
    expect(
      frames
        .filter((f) => f.channel === ExecFrameChannel.stdout)
        .map((f) => f.text)
        .join(''),
    ).toBe('piped');
    const last = frames.at(-1);
    expect(last?.channel).toBe(ExecFrameChannel.control);
    expect(JSON.parse(last?.text ?? '')).toMatchObject({ type: 'exit', exitCode: 3, timedOut: false });
  });

  it('a sandbox that does not exist, a bad start and a bad body are error answers with the envelope', async () => {
    const missing = openRaw('sbx_aaaaaaaaaaaaaaaaaaaa', [startFrame({ cmd: ['true'] })]);
    const notFound = await missing.response;
    expect(notFound.statusCode).toBe(404);
    const envelope = JSON.parse((await readAll(notFound)).toString());
    expect(envelope.error).toMatchObject({ code: 'sandbox_not_found', requestId: expect.stringMatching(/^req_/) });
    missing.request.destroy();

    const badStart = openRaw(sandbox.id, [startFrame({ cmd: [] })]);
    const invalid = await badStart.response;
    expect(invalid.statusCode).toBe(400);
    expect(JSON.parse((await readAll(invalid)).toString()).error.code).toBe('invalid_request');
    badStart.request.destroy();

    const stdinFirst = openRaw(sandbox.id, [execFrame(ExecFrameChannel.stdin, 'x')]);
    const early = await stdinFirst.response;
    expect(early.statusCode).toBe(400);
    expect(JSON.parse((await readAll(early)).toString()).error.message).toMatch(/start frame/);
    stdinFirst.request.destroy();

    const notJson = openRaw(sandbox.id, [execFrame(ExecFrameChannel.control, '{nope')]);
    const garbled = await notJson.response;
    expect(garbled.statusCode).toBe(400);
    expect(JSON.parse((await readAll(garbled)).toString()).error.code).toBe('invalid_request');
    notJson.request.destroy();

    const oversize = openRaw(sandbox.id, [execFrameHeader(ExecFrameChannel.control, 0xffffffff)]);
    const tooLong = await oversize.response;
    expect(tooLong.statusCode).toBe(400);
    expect(JSON.parse((await readAll(tooLong)).toString()).error.message).toMatch(/longer than/);
    oversize.request.destroy();

    const empty = openRaw(sandbox.id, []);
    empty.request.end();
    const noStart = await empty.response;
    expect(noStart.statusCode).toBe(400);
    expect(JSON.parse((await readAll(noStart)).toString()).error.message).toMatch(/before a start frame/);

    const json = openRaw(sandbox.id, [], 'application/json');
    json.request.end('{"cmd":["true"]}');
    const wrongType = await json.response;
    expect(wrongType.statusCode).toBe(400);
    expect(JSON.parse((await readAll(wrongType)).toString()).error.hint).toContain(EXEC_FRAMES_MEDIA_TYPE);
  });

  it('an error after the start is the error frame, last', async () => {
    const { request, response } = openRaw(sandbox.id, [
      startFrame({ cmd: ['sleep', '30'] }),
      execFrame(ExecFrameChannel.control, '{"type":"signal","signal":"SIGNOPE"}'),
    ]);
    const res = await response;
    expect(res.statusCode).toBe(200);
    const frames = framesOf(await readAll(res));
    request.destroy();
    expect(frames[0]?.text).toBe('{"type":"started"}');
    const last = JSON.parse(frames.at(-1)?.text ?? '');
    expect(last).toMatchObject({ type: 'error', error: { code: 'invalid_request', requestId: expect.any(String) } });
  });

  it('a client that goes away mid-stream: the command runs on, or is killed with killOnDisconnect', async () => {
    await sandbox.commands.run('rm -f /tmp/raw-kept /tmp/raw-killed');
    const loud = 'while true; do echo tick; sleep 0.05; done & sleep 1.5; touch /tmp/raw-';
    const kept = openRaw(sandbox.id, [startFrame({ cmd: `${loud}kept; kill $!` })]);
    const killed = openRaw(sandbox.id, [startFrame({ cmd: `${loud}killed; kill $!` }, true)]);
    for (const { request, response } of [kept, killed]) {
      const res = await response;
      expect(res.statusCode).toBe(200);
      // Gone after some output arrived: mid-stream.
      await new Promise<void>((resolve) => res.once('data', () => resolve()));
      request.destroy();
    }
    await new Promise((r) => setTimeout(r, 3000));
    const ls = await sandbox.commands.run('ls /tmp/raw-kept /tmp/raw-killed 2>/dev/null');
    expect(ls.stdout).toBe('/tmp/raw-kept\n');
  });
});
