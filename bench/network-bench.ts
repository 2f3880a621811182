/**
 * The cost of per-sandbox networks (docs/network.md): create, resume and fork on the bench's server (every sandbox
 * with its network, mode `egress`) against a server with `BURROW_NETWORK=off` (runsc `--network=none`), alternating
 * in the same run; and egress throughput from a sandbox to an HTTP server in a namespace of the bench's own "internet"
 * against the same upload from the host.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Sandbox } from '@burrow/sdk';
import { type Summary, summarize, time } from './stats.js';

/** One bench row (same shape as run.ts's). */
export interface NetworkRow {
  metric: string;
  ours: Summary;
  raw: Summary | null;
  ratio: number | null;
  target: string;
  /** Unit of the samples when not ms. */
  unit?: string;
}

type Conn = { apiUrl: string; apiKey: string };

const SETTLE_MS = 2500;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** Bytes each throughput sample uploads. */
const UPLOAD_BYTES = 256 * 1024 * 1024;

/** An HTTP server that reads and discards each POST body (the upload target). */
const SINK = `
import http.server, socketserver
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        left = int(self.headers['Content-Length'])
        while left > 0:
            left -= len(self.rfile.read(min(left, 1 << 20)))
        self.send_response(204); self.end_headers()
    def log_message(self, *a): pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer): daemon_threads = True
S(('0.0.0.0', 8080), H).serve_forever()
`;

function row(metric: string, ours: number[], baseline: number[], target: string, unit?: string): NetworkRow {
  const o = summarize(ours);
  const r = summarize(baseline);
  return { metric, ours: o, raw: r, ratio: Math.round((o.p50 / r.p50) * 100) / 100, target, ...(unit ? { unit } : {}) };
}

/** A namespace joined to the host by a veth, with the sink on a public-range address (198.18/15). */
function sinkNamespace(): { address: string; down(): void } {
  const tag = randomBytes(3).toString('hex');
  const octet = 1 + (Number.parseInt(tag, 16) % 250);
  const [netns, link, address] = [`bnb-${tag}`, `bnb${tag}h`, `198.18.${octet}.2`];
  const ip = (...args: string[]) => execFileSync('ip', args);
  ip('netns', 'add', netns);
  ip('link', 'add', link, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', netns);
  ip('addr', 'add', `198.18.${octet}.1/30`, 'dev', link);
  ip('link', 'set', link, 'up');
  ip('-n', netns, 'addr', 'add', `${address}/30`, 'dev', 'eth0');
  ip('-n', netns, 'link', 'set', 'eth0', 'up');
  ip('-n', netns, 'route', 'add', 'default', 'via', `198.18.${octet}.1`);
  const server: ChildProcess = spawn('ip', ['netns', 'exec', netns, 'python3', '-c', SINK], { stdio: 'ignore' });
  return {
    address,
    down() {
      server.kill('SIGKILL');
      for (const args of [
        ['link', 'del', link],
        ['netns', 'del', netns],
      ]) {
        try {
          execFileSync('ip', args, { stdio: 'ignore' });
        } catch {}
      }
    },
  };
}

/** Mbit/s of one upload of {@link UPLOAD_BYTES} that took `ms`. */
const mbps = (ms: number) => Math.round((UPLOAD_BYTES * 8) / 1e6 / (ms / 1000));

/**
 * Runs the network rows against `networked` (the bench's server) and `plain` (a server with networking off).
 * @returns the rows; throughput rows hold Mbit/s (higher is better) in place of ms
 */
export async function benchNetwork(
  networked: Conn,
  plain: Conn,
  options: { iterations: number; log: (message: string) => void },
): Promise<NetworkRow[]> {
  const { log } = options;
  const cycles = Math.max(1, Math.min(options.iterations, 10));
  const samples = () => ({ create: [] as number[], resume: [] as number[], fork: [] as number[] });
  const ours = samples();
  const none = samples();
  const opts = { memoryMiB: 512, timeoutMs: 1_800_000 };
  for (let i = 0; i < cycles; i++) {
    log(`network: create/resume/fork ${i + 1}/${cycles}`);
    for (const [conn, into] of [
      [networked, ours],
      [plain, none],
    ] as const) {
      let sandbox: Sandbox | undefined;
      into.create.push(
        await time(async () => {
          sandbox = await Sandbox.create({ ...conn, ...opts });
        }),
      );
      if (sandbox === undefined) throw new Error('no sandbox');
      await sandbox.pause();
      await sleep(SETTLE_MS);
      into.resume.push(await time(() => (sandbox as Sandbox).resume()));
      let children: Sandbox[] = [];
      const parent = sandbox;
      into.fork.push(
        await time(async () => {
          children = await parent.fork({ count: 1 });
        }),
      );
      for (const child of children) await child.delete();
      await sandbox.delete();
    }
  }
  const rows = [
    row('network: create (with network / --network=none)', ours.create, none.create, '≤ 1.1 × none'),
    row('network: resume (with network / --network=none)', ours.resume, none.resume, '≤ 1.1 × none'),
    row('network: fork, 1 child (with network / --network=none)', ours.fork, none.fork, '≤ 1.1 × none'),
  ];
  const sink = sinkNamespace();
  try {
    const sandbox = await Sandbox.create({ ...networked, ...opts, memoryMiB: 1024 });
    try {
      await sandbox.commands.run(['sh', '-c', `head -c ${UPLOAD_BYTES} /dev/urandom > /root/upload.bin`], {
        check: true,
        timeoutMs: 120_000,
      });
      const host = `/var/tmp/burrow-bench-upload-${randomBytes(4).toString('hex')}`;
      execFileSync('sh', ['-c', `head -c ${UPLOAD_BYTES} /dev/urandom > ${host}`]);
      const url = `http://${sink.address}:8080/`;
      const fromSandbox: number[] = [];
      const fromHost: number[] = [];
      try {
        for (let i = 0; i < Math.min(cycles, 5); i++) {
          log(`network: upload ${i + 1}`);
          const ms = await time(async () => {
            await sandbox.commands.run(['curl', '-sS', '-o', '/dev/null', '--data-binary', '@/root/upload.bin', url], {
              check: true,
              timeoutMs: 120_000,
            });
          });
          fromSandbox.push(mbps(ms));
          fromHost.push(
            mbps(
              await time(async () => {
                execFileSync('curl', ['-sS', '-o', '/dev/null', '--data-binary', `@${host}`, url]);
              }),
            ),
          );
        }
      } finally {
        execFileSync('rm', ['-f', host]);
      }
      rows.push(
        row(
          'network: egress throughput, sandbox → local server (Mbit/s; ratio to the host)',
          fromSandbox,
          fromHost,
          '≥ 1000 Mbit/s or ≥ 0.5 × host',
          'Mbit/s',
        ),
      );
    } finally {
      await sandbox.delete();
    }
  } finally {
    sink.down();
  }
  return rows;
}
