/**
 * The servers of a test internet, run inside its network namespace by {@link startTestInternet} as a child process
 * (`ip netns exec <ns> node test-internet-servers.js <config JSON>`). It writes one JSON line per event to stdout
 * (`{"event":"ready"|"dns"|"http"|"pong",...}`), answers `{"type":"ping","id":n}` lines on stdin with a `pong` after every
 * earlier event, and exits when stdin closes (its parent is gone).
 */
import { createHash } from 'node:crypto';
import { createReadStream, readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { startAuthoritativeDns } from './authoritative-dns.js';

/** What the parent passes as the first argument (JSON). */
export interface TestInternetServersConfig {
  /** Address the DNS server binds (UDP replies must leave from the address asked). */
  dnsAddress: string;
  records: Record<string, string[]>;
  ttlSeconds: number;
  /** Directory holding the wheels the index serves. */
  filesDir: string;
  /** Certificate and key (PEM files) of the HTTPS server. */
  tls: { certPath: string; keyPath: string };
  /** Wheels served under `/simple/<name>/`. */
  wheels: Array<{ name: string; fileName: string; sha256: string }>;
}

const emit = (event: Record<string, unknown>): void => {
  process.stdout.write(`${JSON.stringify(event)}\n`);
};

async function main(): Promise<void> {
  const config = JSON.parse(process.argv[2] ?? '{}') as TestInternetServersConfig;
  const dns = await startAuthoritativeDns({
    address: config.dnsAddress,
    records: config.records,
    ttlSeconds: config.ttlSeconds,
    onQuery: (query) => emit({ event: 'dns', ...query }),
  });
  const handler = (scheme: 'http' | 'https') => (request: http.IncomingMessage, response: http.ServerResponse) => {
    const path = new URL(request.url ?? '/', 'http://x').pathname;
    const from = request.socket.remoteAddress;
    emit({ event: 'http', scheme, method: request.method, path, from, host: request.headers.host });
    if (path === '/echo' || path === '/digest') {
      // The request as it arrived: what a proxy on the way changed shows here. `/digest` answers SHA-256 of the
      // target and of each header value instead, so a client can check a value without receiving it.
      const digest = (text: string) => createHash('sha256').update(text).digest('hex');
      const body =
        path === '/echo'
          ? { scheme, url: request.url, headers: request.headers }
          : {
              scheme,
              url: digest(request.url ?? ''),
              headers: Object.fromEntries(
                Object.entries(request.headers).map(([name, value]) => [name, digest(String(value))]),
              ),
            };
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(`${JSON.stringify(body)}\n`);
      return;
    }
    route(config, path, request.socket.localAddress ?? '', response);
  };
  const server = http.createServer(handler('http'));
  await new Promise<void>((resolve) => server.listen(80, '0.0.0.0', () => resolve()));
  const tls = { cert: readFileSync(config.tls.certPath), key: readFileSync(config.tls.keyPath) };
  const secure = https.createServer(tls, handler('https'));
  await new Promise<void>((resolve) => secure.listen(443, '0.0.0.0', () => resolve()));
  emit({ event: 'ready', dnsPort: dns.port, httpPort: 80, httpsPort: 443 });

  const input = createInterface({ input: process.stdin });
  input.on('line', (line) => {
    const message = JSON.parse(line) as { type: string; id: number };
    // A datagram that arrived before this line may be read in the same loop turn after it: answer once the turn's
    // I/O is done, so every query sent before the ping is logged before the pong.
    if (message.type === 'ping') setTimeout(() => setImmediate(() => emit({ event: 'pong', id: message.id })), 10);
  });
  input.on('close', () => process.exit(0));
}

function route(config: TestInternetServersConfig, path: string, localAddress: string, response: http.ServerResponse) {
  const html = (body: string) => {
    response.writeHead(200, { 'content-type': 'text/html' });
    response.end(`<!DOCTYPE html><html><body>\n${body}\n</body></html>\n`);
  };
  if (path === '/') {
    response.writeHead(200, { 'content-type': 'text/plain' });
    response.end(`burrow test internet ${localAddress}\n`);
    return;
  }
  const bytes = /^\/bytes\/([0-9]{1,10})$/.exec(path);
  if (bytes) {
    sendBytes(response, Number(bytes[1]));
    return;
  }
  if (path === '/simple/') {
    html(config.wheels.map((w) => `<a href="/simple/${w.name}/">${w.name}</a>`).join('\n'));
    return;
  }
  const project = /^\/simple\/([a-z0-9-]+)\/$/.exec(path);
  const wheels = config.wheels.filter((w) => w.name === project?.[1]);
  if (project && wheels.length > 0) {
    html(wheels.map((w) => `<a href="/files/${w.fileName}#sha256=${w.sha256}">${w.fileName}</a>`).join('\n'));
    return;
  }
  const file = /^\/files\/([A-Za-z0-9_.-]+\.whl)$/.exec(path);
  if (file && config.wheels.some((w) => w.fileName === file[1])) {
    response.writeHead(200, { 'content-type': 'application/octet-stream' });
    createReadStream(join(config.filesDir, file[1] ?? '')).pipe(response);
    return;
  }
  response.writeHead(404, { 'content-type': 'text/plain' });
  response.end('not found\n');
}

/** `count` bytes of zeros, written as fast as the client reads. */
function sendBytes(response: http.ServerResponse, count: number): void {
  response.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(count) });
  const chunk = Buffer.alloc(64 * 1024);
  let left = count;
  const pump = (): void => {
    while (left > 0) {
      const piece = left >= chunk.length ? chunk : chunk.subarray(0, left);
      left -= piece.length;
      if (!response.write(piece)) {
        response.once('drain', pump);
        return;
      }
    }
    response.end();
  };
  pump();
}

main().catch((error: unknown) => {
  process.stderr.write(`test internet servers failed: ${String(error)}\n`);
  process.exit(1);
});
