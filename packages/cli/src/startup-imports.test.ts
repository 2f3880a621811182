/**
 * What a `burrow` call and an SDK import load before any request (issue 17): zod and every schema cost about 0.2 s of
 * CPU, `ws` with TLS and crypto about 0.08 s more, and an agent pays that on each step it shells out. The CPU
 * figures themselves are bench rows (bench/cli-bench.ts); this checks which modules load, which does not depend on
 * how busy the machine is. Runs the built `dist` (npm run build) and the bundle.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const repo = join(import.meta.dirname, '..', '..', '..');
const bin = join(repo, 'packages', 'cli', 'dist', 'bin.js');
const bundle = join(repo, 'packages', 'cli', 'bundle', 'bin.js');

let dir = '';
let register = '';

/**
 * The URLs of every ES module and the paths of every CommonJS file `node ...args` loads (from loader hooks), its
 * exit code and the rest of its stderr.
 */
function loadedBy(
  args: string[],
  apiUrl = 'http://127.0.0.1:9',
): Promise<{ loaded: string[]; code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', register, ...args],
      { cwd: repo, env: { ...process.env, BURROW_URL: apiUrl, BURROW_API_KEY: 'bk_test' } },
      (error, _stdout, stderr) => {
        const lines = stderr.split('\n');
        resolve({
          loaded: lines.filter((line) => line.startsWith('LOADED ')).map((line) => line.slice('LOADED '.length)),
          code: typeof error?.code === 'number' ? error.code : 0,
          stderr: lines.filter((line) => !line.startsWith('LOADED ')).join('\n'),
        });
      },
    );
  });
}

const matching = (loaded: string[], pattern: RegExp) => loaded.filter((url) => pattern.test(url));
const ZOD = /\/node_modules\/zod\//;
const WS = /\/node_modules\/ws\//;
const TLS = /^builtin:NativeModule (tls|_tls_wrap|crypto|https)$/;

/**
 * A stand-in for the API (a FAKE of the two routes `burrow exec` calls, so the check does not need a sandbox):
 * the sandbox record, and the HTTP exec stream answering `started` and an exit with code 3.
 */
let fakeApi: Server;
let fakeApiUrl = '';

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'burrow-startup-'));
  await writeFile(
    join(dir, 'hooks.mjs'),
    'export async function load(url, context, next) { process.stderr.write("LOADED " + url + "\\n"); return next(url, context); }\n',
  );
  register = join(dir, 'register.mjs');
  await writeFile(
    register,
    [
      "import { register } from 'node:module';",
      "import Module from 'node:module';",
      `register(${JSON.stringify(`file://${join(dir, 'hooks.mjs')}`)});`,
      // CommonJS files loaded through require() do not pass the ESM hooks.
      'const load = Module._load;',
      'Module._load = function (request, parent, isMain) {',
      '  const out = load.apply(this, arguments);',
      '  try { process.stderr.write("LOADED " + Module._resolveFilename(request, parent, isMain) + "\\n"); } catch {}',
      '  return out;',
      '};',
      // Node's own modules (node:tls and the rest) show in its module load list.
      'process.on("exit", () => { for (const name of process.moduleLoadList) process.stderr.write("LOADED builtin:" + name + "\\n"); });',
    ].join('\n'),
  );
});

beforeAll(async () => {
  fakeApi = createServer((request, response) => {
    request.resume();
    if (request.method === 'GET') {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify(fakeSandbox()));
      return;
    }
    response.writeHead(200, { 'content-type': 'application/vnd.burrow.exec-frames' });
    const frame = (text: string) => {
      const payload = Buffer.from(text);
      const header = Buffer.alloc(5);
      header[0] = 3;
      header.writeUInt32BE(payload.length, 1);
      return Buffer.concat([header, payload]);
    };
    response.write(frame('{"type":"started"}'));
    response.end(frame('{"type":"exit","exitCode":3,"signal":null,"timedOut":false,"reason":null,"durationMs":1}'));
  });
  await new Promise<void>((resolve) => fakeApi.listen(0, '127.0.0.1', resolve));
  const address = fakeApi.address();
  fakeApiUrl = `http://127.0.0.1:${typeof address === 'object' && address !== null ? address.port : 0}`;
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
  await new Promise((resolve) => fakeApi?.close(resolve));
});

describe('start-up imports', () => {
  it('burrow --version loads neither the SDK nor zod', async () => {
    const { loaded, code } = await loadedBy([bin, '--version']);
    expect(code).toBe(0);
    expect(matching(loaded, /\/packages\/cli\/dist\/bin\.js$/)).toHaveLength(1);
    expect(matching(loaded, /\/packages\/sdk\/dist\/index\.js$/)).toEqual([]);
    expect(matching(loaded, ZOD)).toEqual([]);
    expect(matching(loaded, WS)).toEqual([]);
  });

  it('a usage error loads neither the SDK nor zod', async () => {
    const { loaded, code, stderr } = await loadedBy([bin, 'sandbox', 'create', '--cpu']);
    expect(code).toBe(2);
    expect(stderr).toMatch(/argument missing/);
    expect(matching(loaded, /\/packages\/sdk\/dist\/index\.js$/)).toEqual([]);
    expect(matching(loaded, ZOD)).toEqual([]);
  });

  it('burrow exec ID -- true (the bundle) loads neither zod nor ws nor TLS, and exits with the exit code', async () => {
    const { loaded, code, stderr } = await loadedBy([bundle, 'exec', SANDBOX_ID, '--', 'true'], fakeApiUrl);
    expect(stderr).toBe('');
    expect(code).toBe(3);
    expect(matching(loaded, /bundle\/bin\.js$/)).toHaveLength(1);
    expect(matching(loaded, ZOD)).toEqual([]);
    expect(matching(loaded, WS)).toEqual([]);
    expect(matching(loaded, TLS)).toEqual([]);
    expect(matching(loaded, /^builtin:NativeModule http$/)).toHaveLength(1);
    // `burrow mcp` loads the MCP server in a chunk of its own; esbuild names each bundled module's path in a comment.
    for (const url of matching(loaded, /\/packages\/cli\/bundle\//)) {
      expect(await readFile(new URL(url), 'utf8'), url).not.toContain('node_modules/@modelcontextprotocol/');
    }
  });

  it("import('@burrow/sdk') loads neither zod nor ws", async () => {
    const { loaded, code } = await loadedBy(['--input-type=module', '-e', "await import('@burrow/sdk')"]);
    expect(code).toBe(0);
    expect(matching(loaded, /\/packages\/sdk\/dist\/index\.js$/)).toHaveLength(1);
    expect(matching(loaded, ZOD)).toEqual([]);
    expect(matching(loaded, WS)).toEqual([]);
  });
});

const SANDBOX_ID = 'sbx_aaaaaaaaaaaaaaaaaaaa';

/** A running sandbox's record as `GET /v1/sandboxes/{id}` answers it. */
function fakeSandbox(): Record<string, unknown> {
  const at = new Date().toISOString();
  return {
    id: SANDBOX_ID,
    template: 'base',
    templateId: '0'.repeat(64),
    state: 'running',
    conditions: [],
    env: {},
    cwd: '/root',
    hostname: 'sbx-aaaaaaaaaaaaaaaaaaaa',
    resources: { cpuCount: 1, memoryMiB: 512, diskMiB: 2048 },
    labels: {},
    timeoutMs: null,
    timeoutAction: 'delete',
    idleTimeoutMs: null,
    maxAgeMs: null,
    pausedRetentionMs: null,
    snapshotKeepLast: null,
    expiresAt: null,
    expiry: null,
    idleDeadlineAt: null,
    timeoutAt: null,
    desiredState: 'running',
    autoResume: true,
    keeps: { filesystem: true, memory: true },
    lineage: { parentId: null, snapshotId: null },
    quarantine: null,
    createdAt: at,
    updatedAt: at,
  };
}
