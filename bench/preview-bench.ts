/**
 * Preview URLs (docs/network.md, "Ingress and preview URLs"): one request through the server's preview proxy
 * against the same request from the host straight to the sandbox's address (its router forwards both to the guest),
 * requests/s with 50 connections at once both ways, and a request that wakes a paused sandbox against a plain resume.
 * The server inside is Python's `http.server`, the same on both paths.
 */
import { Agent, request as httpRequest } from 'node:http';
import { Sandbox } from '@burrow/sdk';
import { type Summary, summarize, time } from './stats.js';

/** One bench row (same shape as run.ts's). */
export interface PreviewRow {
  metric: string;
  ours: Summary;
  raw: Summary | null;
  ratio: number | null;
  target: string;
}

type Conn = { apiUrl: string; apiKey: string };

const PORT = 8000;
const SETTLE_MS = 2500;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A GET of `/` to `address:port` with `headers`, body read and dropped. */
function get(agent: Agent, address: string, port: number, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: address, port, path: '/', agent, headers }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Requests per second of `connections` loops of `send` for `durationMs`. */
async function throughput(connections: number, durationMs: number, send: () => Promise<number>): Promise<number> {
  const end = performance.now() + durationMs;
  let done = 0;
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (performance.now() < end) {
        if ((await send()) !== 200) throw new Error('a request failed');
        done += 1;
      }
    }),
  );
  return (done * 1000) / durationMs;
}

/**
 * Runs the preview rows on the bench's server.
 * @param ingressAddress the host address of a sandbox's ports (the driver's `ingressAddress`)
 * @returns the rows
 */
export async function benchPreview(
  conn: Conn,
  ingressAddress: (sandboxId: string) => Promise<string | null | undefined>,
  options: { iterations: number; quick: boolean; log: (message: string) => void },
): Promise<PreviewRow[]> {
  const serverPort = Number(new URL(conn.apiUrl).port);
  const sandbox = await Sandbox.create({ ...conn, memoryMiB: 512 });
  const agent = new Agent({ keepAlive: true, maxSockets: 64 });
  try {
    await sandbox.commands.run(['python3', '-m', 'http.server', String(PORT)], { background: true });
    const url = await sandbox.ports.url(PORT);
    const address = await ingressAddress(sandbox.id);
    if (address === null || address === undefined) throw new Error('the sandbox has no ingress address');
    const previewHeaders = { host: new URL(url.url).host, 'x-burrow-access-token': url.accessToken ?? '' };
    const viaProxy = () => get(agent, '127.0.0.1', serverPort, previewHeaders);
    const direct = () => get(agent, address, PORT, {});
    for (let i = 0; i < 100 && (await direct().catch(() => 0)) !== 200; i++) await sleep(100);
    const requests = options.quick ? 20 : 500;
    options.log(`preview: ${requests} requests through the proxy and straight, alternating`);
    const proxied: number[] = [];
    const straight: number[] = [];
    for (let i = 0; i < requests; i++) {
      proxied.push(await time(viaProxy));
      straight.push(await time(direct));
    }
    const durationMs = options.quick ? 1000 : 5000;
    options.log('preview: requests/s at 50 connections');
    const rpsProxy = await throughput(50, durationMs, viaProxy);
    const rpsDirect = await throughput(50, durationMs, direct);
    options.log(`preview: wake on request vs resume, ${options.iterations} each`);
    const wake: number[] = [];
    const resume: number[] = [];
    for (let i = 0; i < options.iterations; i++) {
      await sandbox.pause();
      await sleep(SETTLE_MS);
      wake.push(
        await time(async () => {
          if ((await viaProxy()) !== 200) throw new Error('the waking request failed');
        }),
      );
      await sandbox.pause();
      await sleep(SETTLE_MS);
      resume.push(await time(() => sandbox.resume()));
    }
    const p = summarize(proxied);
    const s = summarize(straight);
    const w = summarize(wake);
    const r = summarize(resume);
    const one = (value: number) => summarize([value]);
    return [
      {
        metric: 'preview: one request through the proxy (raw: straight to the sandbox) (ms)',
        ours: p,
        raw: s,
        ratio: Math.round((p.p50 / s.p50) * 100) / 100,
        target: `p99 overhead ${Math.round((p.p99 - s.p99) * 10) / 10} ms`,
      },
      {
        metric: 'preview: requests/s at 50 connections through the proxy (raw: straight) (req/s)',
        ours: one(Math.round(rpsProxy)),
        raw: one(Math.round(rpsDirect)),
        ratio: Math.round((rpsProxy / rpsDirect) * 100) / 100,
        target: '—',
      },
      {
        metric: 'preview: request that wakes a paused sandbox (raw: plain resume) (ms)',
        ours: w,
        raw: r,
        ratio: Math.round((w.p50 / r.p50) * 100) / 100,
        target: '—',
      },
    ];
  } finally {
    agent.destroy();
    await sandbox.delete().catch(() => undefined);
  }
}
