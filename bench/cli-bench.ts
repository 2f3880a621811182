/**
 * The CLI's start-up cost: the CPU time (user + sys) of one `burrow --version`, one `burrow exec ID -- true` and one
 * `import('@burrow/sdk')`, each against bare Node (`node -e 1`) measured in the same iteration. Agents shell out to
 * `burrow` per step, so what a call spends before its request is paid on every step.
 *
 * Each sample is a fresh process run under `bash -c '…; times'`: bash's `times` prints the CPU time of the children
 * it waited for (1 ms resolution), so the figure is the process's own CPU, not the wall time the shared host adds.
 * The four commands run in turn within an iteration, so load on the host falls on all of them alike. `exec` streams
 * over plain HTTP (`POST …/exec/stream`): the WebSocket library with TLS and crypto would cost it about 80 ms more.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { Sandbox } from '@burrow/sdk';
import { summarize } from './stats.js';

/** One bench row (same shape as run.ts's). */
export interface CliRow {
  metric: string;
  ours: ReturnType<typeof summarize>;
  raw: ReturnType<typeof summarize> | null;
  ratio: number | null;
  target: string;
}

/** CPU ms (user + sys) one run of `argv` took, from bash's `times`; throws when the command fails. */
export function cpuMs(argv: readonly string[], options: { cwd: string; env: NodeJS.ProcessEnv }): Promise<number> {
  return new Promise((resolve, reject) => {
    execFile(
      'bash',
      ['-c', '"$@" >/dev/null 2>&1 || exit $?; times', 'bash', ...argv],
      { cwd: options.cwd, env: options.env },
      (error, stdout) => {
        if (error) return reject(new Error(`${argv.join(' ')} failed: ${error.message}`));
        // `times` prints the shell's own user/sys, then its children's: "0m0.120s 0m0.031s".
        const children = stdout.trim().split('\n').at(-1) ?? '';
        const seconds = [...children.matchAll(/(\d+)m([\d.]+)s/g)].map((m) => Number(m[1]) * 60 + Number(m[2]));
        if (seconds.length !== 2) return reject(new Error(`unexpected output of times: ${stdout}`));
        resolve(Math.round(((seconds[0] ?? 0) + (seconds[1] ?? 0)) * 1000));
      },
    );
  });
}

/** The CLI and SDK start-up rows; one sandbox of ours for `exec`. */
export async function benchCli(
  conn: { apiUrl: string; apiKey: string },
  options: { iterations: number; repo: string; log: (message: string) => void },
): Promise<CliRow[]> {
  const bin = join(options.repo, 'packages', 'cli', 'bundle', 'bin.js');
  const env = { ...process.env, BURROW_URL: conn.apiUrl, BURROW_API_KEY: conn.apiKey };
  const run = (argv: readonly string[]) => cpuMs(argv, { cwd: options.repo, env });
  const sandbox = await Sandbox.create({ ...conn, template: 'base', timeoutMs: 600_000 });
  const bare: number[] = [];
  const version: number[] = [];
  const exec: number[] = [];
  const sdk: number[] = [];
  try {
    // One untimed round first: the page cache and the sandbox's first exec are not what the rows are about.
    await run(['node', bin, 'exec', sandbox.id, '--', 'true']);
    for (let i = 0; i < options.iterations; i++) {
      options.log(`cli ${i + 1}/${options.iterations}`);
      bare.push(await run(['node', '-e', '1']));
      version.push(await run(['node', bin, '--version']));
      exec.push(await run(['node', bin, 'exec', sandbox.id, '--', 'true']));
      sdk.push(await run(['node', '-e', "import('@burrow/sdk')"]));
    }
  } finally {
    await sandbox.delete();
  }
  const raw = summarize(bare);
  const row = (metric: string, samples: number[], target: string): CliRow => {
    const ours = summarize(samples);
    return { metric, ours, raw, ratio: Math.round((ours.p50 / raw.p50) * 100) / 100, target };
  };
  const median = (samples: number[]) => Math.round(summarize(samples).p50);
  // The target is stated as CPU added over bare Node: the figures the rows compare by ratio, as differences.
  options.log(
    `cli: over bare node (p50 ${median(bare)} ms): --version +${median(version) - median(bare)} ms, ` +
      `exec ID -- true +${median(exec) - median(bare)} ms, import('@burrow/sdk') +${median(sdk) - median(bare)} ms ` +
      '(target: CLI calls ≤ +100 ms)',
  );
  return [
    row('CLI CPU, `burrow --version` (user+sys ms; raw: `node -e 1`)', version, 'p50 ≤ raw + 100 ms'),
    row('CLI CPU, `burrow exec ID -- true` (user+sys ms; raw: `node -e 1`)', exec, 'p50 ≤ raw + 100 ms'),
    row("SDK import CPU, `import('@burrow/sdk')` (user+sys ms; raw: `node -e 1`)", sdk, '—'),
  ];
}
