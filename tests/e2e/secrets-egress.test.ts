/**
 * End to end: secrets at egress (real server, real runsc, real namespaces). The "internet" is a test namespace whose
 * HTTPS and HTTP servers answer `/digest` with SHA-256 of each header as it arrived, so the test sees which value
 * reached the host without the sandbox ever receiving it. A sandbox holds only placeholders; its requests to the
 * bound host carry the real value, to any other host the placeholder; the real value is on no disk and in no
 * memory image (pause, fork child).
 */

import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { startTestInternet, type TestInternet } from '@burrow/runtime-gvisor/test-support';
import { Sandbox } from '@burrow/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './burrow-test-server.js';

const RUN_ID = `secrets-${Date.now().toString(36)}`;
let server: TestServer;
let internet: TestInternet;
const connection = () => ({ apiUrl: server.apiUrl, apiKey: server.adminKey });
const startedMs = Date.now();
/** Progress on stderr: a run that hangs shows where. */
const step = (what: string) =>
  console.error(`secrets-egress +${((Date.now() - startedMs) / 1000).toFixed(1)}s ${what}`);
const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

beforeAll(async () => {
  internet = await startTestInternet({ records: { 'api.test': ['@1'], 'other.test': ['@2'] } });
  server = await startTestServer({
    env: {
      BURROW_DNS_UPSTREAM: `${internet.dns.address}:${internet.dns.port}`,
      BURROW_EGRESS_UPSTREAM_CA: internet.tls.caCertPath,
    },
  });
  console.info(`secrets-egress e2e: run ${RUN_ID}, internet ${internet.namespace}, server ${server.apiUrl}`);
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
    await internet?.close();
  }
});

async function api(method: string, path: string, body?: object): Promise<{ status: number; json: unknown }> {
  const response = await fetch(`${server.apiUrl}/v1${path}`, {
    method,
    headers: { authorization: `Bearer ${server.adminKey}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  const text = await response.text();
  return { status: response.status, json: text === '' ? null : JSON.parse(text) };
}

async function sh(sandbox: Sandbox, script: string, timeoutMs = 60_000) {
  const result = await sandbox.commands.run(['/bin/sh', '-c', script], { timeoutMs });
  step(`${script.slice(0, 60).replace(/\n/g, ' ')} → exit ${result.exitCode}`);
  return result;
}

type Digests = { scheme: string; headers: Record<string, string> };

/** `/digest` of `url` fetched with curl inside the sandbox, with the placeholders in two headers. */
async function curlDigest(sandbox: Sandbox, url: string): Promise<Digests> {
  const result = await sh(
    sandbox,
    `curl -sS -m 20 -H "Authorization: Bearer $OPENAI_API_KEY" -H "X-Token: tok=$TOKEN2" ${url}`,
  );
  expect(result.exitCode, `${result.stdout}${result.stderr}`).toBe(0);
  return JSON.parse(result.stdout) as Digests;
}

/**
 * Reads every regular file under a path, only the data extents of sparse ones (SEEK_DATA/SEEK_HOLE: a disk image is
 * 2 GiB with a few hundred MiB written), and prints each needle (argv[2:]) found in any of them.
 */
const SCAN_SCRIPT = `
import os, sys
root, needles = sys.argv[1], [n.encode() for n in sys.argv[2:]]
found, overlap, chunk = set(), max(len(n) for n in needles), 8 << 20
paths = [root] if os.path.isfile(root) else [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
for path in paths:
    if os.path.islink(path) or not os.path.isfile(path): continue
    with open(path, 'rb') as fh:
        fd, end, at = fh.fileno(), os.fstat(fh.fileno()).st_size, 0
        while at < end:
            try: at = os.lseek(fd, at, os.SEEK_DATA)
            except OSError: break
            hole = os.lseek(fd, at, os.SEEK_HOLE)
            tail = b''
            while at < hole:
                os.lseek(fd, at, os.SEEK_SET)
                block = tail + os.read(fd, min(chunk, hole - at))
                if not block: break
                at += len(block) - len(tail)
                found.update(n for n in needles if n in block)
                tail = block[-overlap:]
print('\\n'.join(sorted(n.decode() for n in found)))
`;

/** Which of `needles` occur anywhere under `path` (host): every byte written to a file there, sparse holes skipped. */
async function found(path: string, needles: readonly string[]): Promise<string[]> {
  // Asynchronous: the server under test runs in this process and must keep answering while the scan reads.
  const stdout = await new Promise<string>((resolve, reject) => {
    execFile('python3', ['-c', SCAN_SCRIPT, path, ...needles], { maxBuffer: 1 << 20 }, (error, out, err) => {
      if (error !== null) reject(new Error(`scan failed: ${err}`));
      else resolve(out);
    });
  });
  const hits = needles.filter((needle) => stdout.split('\n').includes(needle));
  step(`scan ${path}: ${hits.length} of ${needles.length} found`);
  return hits;
}

describe('secrets at egress', () => {
  it('puts the value into requests to the bound host only, rotates on the next request, and leaves no copy in the sandbox', async () => {
    const apiKey = `sk-real-${randomBytes(16).toString('hex')}`;
    const token = `tok-real-${randomBytes(16).toString('hex')}`;
    expect(
      (
        await api('PUT', '/secrets/API_KEY', {
          value: apiKey,
          hosts: ['api.test'],
          header: 'Authorization',
          format: 'Bearer {value}',
        })
      ).status,
    ).toBe(200);
    expect((await api('PUT', '/secrets/TOKEN2', { value: token, hosts: ['*.nothing.test', 'api.test'] })).status).toBe(
      200,
    );
    const listed = await api('GET', '/secrets');
    expect(JSON.stringify(listed.json)).not.toContain(apiKey);

    const sandbox = await Sandbox.create({
      ...connection(),
      labels: { e2e: RUN_ID },
      secrets: [{ name: 'API_KEY', env: 'OPENAI_API_KEY' }, 'TOKEN2'],
    });
    step(`created ${sandbox.id}`);
    const env = await sh(sandbox, 'echo "$OPENAI_API_KEY $TOKEN2"');
    const [placeholder, placeholder2] = env.stdout.trim().split(' ') as [string, string];
    expect(placeholder).toMatch(/^burrow-secret-[0-9a-f]{32}$/);
    expect(placeholder2).toMatch(/^burrow-secret-[0-9a-f]{32}$/);

    // HTTPS to the bound host: curl trusts the egress CA through the system bundle; both secrets arrive.
    const bound = await curlDigest(sandbox, 'https://api.test/digest');
    expect(bound.scheme).toBe('https');
    expect(bound.headers.authorization).toBe(sha256(`Bearer ${apiKey}`));
    expect(bound.headers['x-token']).toBe(sha256(`tok=${token}`));
    // HTTPS to another host is not intercepted (the test internet's own certificate): the placeholders arrive.
    const other = await sh(
      sandbox,
      `curl -sS -m 20 --cacert /dev/stdin -H "Authorization: Bearer $OPENAI_API_KEY" https://other.test/digest <<'EOF'\n${internet.tls.caCertPem}EOF`,
    );
    expect(other.exitCode, other.stderr).toBe(0);
    expect((JSON.parse(other.stdout) as Digests).headers.authorization).toBe(sha256(`Bearer ${placeholder}`));
    // Plain HTTP to the bound host gets the value too.
    const plain = await curlDigest(sandbox, 'http://api.test/digest');
    expect(plain.scheme).toBe('http');
    expect(plain.headers.authorization).toBe(sha256(`Bearer ${apiKey}`));
    // Python's ssl and Node's fetch trust the CA too (system bundle; NODE_EXTRA_CA_CERTS).
    const python = await sh(
      sandbox,
      `python3 -c "import urllib.request,os,json; r=urllib.request.urlopen(urllib.request.Request('https://api.test/digest', headers={'X-Token': os.environ['TOKEN2']}), timeout=20); print(json.load(r)['headers']['x-token'])"`,
    );
    expect(python.stdout.trim(), python.stderr).toBe(sha256(token));
    const node = await sh(
      sandbox,
      `node -e "fetch('https://api.test/digest').then(r => r.json()).then(j => console.log(j.headers.authorization))"`,
    );
    expect(node.stdout.trim(), node.stderr).toBe(sha256(`Bearer ${apiKey}`));

    // Rotation: the next request carries the new value, no restart.
    const rotated = `sk-rotated-${randomBytes(16).toString('hex')}`;
    expect((await api('POST', '/secrets/API_KEY/rotate', { value: rotated })).status).toBe(200);
    expect((await curlDigest(sandbox, 'https://api.test/digest')).headers.authorization).toBe(
      sha256(`Bearer ${rotated}`),
    );

    // A process holding the placeholder in memory, and a file holding it on disk: the greps below can find what
    // the sandbox has (positive controls) and must find no real value.
    await sh(sandbox, 'echo "$OPENAI_API_KEY" > /root/key.txt && sync');
    await sandbox.commands.run(
      ['python3', '-c', 'import os,time; held=[os.environ["OPENAI_API_KEY"]]*4; time.sleep(3600)'],
      { background: true },
    );
    const dir = join(server.dataDir, 'sandboxes', sandbox.id);
    const values = [apiKey, rotated, token];
    expect(await found(join(dir, 'disk.img'), [placeholder, ...values])).toEqual([placeholder]);
    await sandbox.pause();
    step('await sandbox.pause();');
    expect(await found(join(dir, 'checkpoint'), [placeholder, ...values])).toEqual([placeholder]);
    await sandbox.resume();
    step('await sandbox.resume();');

    // A fork child holds the same placeholders and gets the value; its memory image holds none either.
    const [child] = await sandbox.fork({ count: 1 });
    step('forked');
    if (child === undefined) throw new Error('fork returned no child');
    expect((await curlDigest(child, 'https://api.test/digest')).headers.authorization).toBe(
      sha256(`Bearer ${rotated}`),
    );
    await child.pause();
    step('await child.pause();');
    expect(await found(join(server.dataDir, 'sandboxes', child.id, 'checkpoint'), [placeholder])).toEqual([
      placeholder,
    ]);
    // The whole data dir: both disks, both pause images, the fork point, the database.
    expect(await found(server.dataDir, values)).toEqual([]);
  }, 480_000);

  it('refuses an unknown secret at create and a value over 64 KiB, with stable codes', async () => {
    const unknown = await api('POST', '/sandboxes', { secrets: ['NO_SUCH_SECRET'], labels: { e2e: RUN_ID } });
    expect(unknown.status).toBe(400);
    expect((unknown.json as { error: { code: string } }).error.code).toBe('unknown_secret');
    const large = await api('PUT', '/secrets/BIG', { value: 'x'.repeat(65_537), hosts: ['api.test'] });
    expect(large.status).toBe(413);
    expect((large.json as { error: { code: string } }).error.code).toBe('secret_too_large');
  });
});
