/**
 * What a `burrow` call and an SDK import load before any request (issue 17): zod and every schema cost about 0.2 s of
 * CPU, `ws` through its ESM wrapper about 0.1 s more, and an agent pays that on each step it shells out. The CPU
 * figures themselves are bench rows (bench/cli-bench.ts); this checks which modules load, which does not depend on
 * how busy the machine is. Runs the built `dist` (npm run build).
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const repo = join(import.meta.dirname, '..', '..', '..');
const bin = join(repo, 'packages', 'cli', 'dist', 'bin.js');

let dir = '';
let register = '';

/**
 * The URLs of every ES module and the paths of every CommonJS file `node ...args` loads (from loader hooks), its
 * exit code and the rest of its stderr.
 */
function loadedBy(args: string[]): Promise<{ loaded: string[]; code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', register, ...args],
      { cwd: repo, env: { ...process.env, BURROW_URL: 'http://127.0.0.1:9' } },
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
    ].join('\n'),
  );
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
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

  it("import('@burrow/sdk') loads neither zod nor ws", async () => {
    const { loaded, code } = await loadedBy(['--input-type=module', '-e', "await import('@burrow/sdk')"]);
    expect(code).toBe(0);
    expect(matching(loaded, /\/packages\/sdk\/dist\/index\.js$/)).toHaveLength(1);
    expect(matching(loaded, ZOD)).toEqual([]);
    expect(matching(loaded, WS)).toEqual([]);
  });
});
