/**
 * An agent-style workflow on a real Burrow sandbox: put a small Python project with a failing test into a
 * sandbox, run its tests, apply a fix by writing a file, run the tests again, download a report, delete the
 * sandbox. Each step prints its wall time.
 *
 * Run: `npx tsx examples/fix-failing-test/main.ts` with a server running (`npx burrow server`) and
 * BURROW_URL / BURROW_API_KEY set (the README's command 1 does all of this).
 */
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Sandbox } from '@burrow/sdk';

const here = dirname(fileURLToPath(import.meta.url));
const projectDir = join(here, 'project');
const remoteDir = '/root/project';
const reportPath = process.argv[2] ?? join(process.cwd(), 'burrow-report.json');

async function step<T>(title: string, fn: () => Promise<T>): Promise<T> {
  const started = performance.now();
  process.stdout.write(`• ${title} ... `);
  const result = await fn();
  process.stdout.write(`${(performance.now() - started).toFixed(0)} ms\n`);
  return result;
}

const sandbox = await step('create sandbox (template base)', () =>
  Sandbox.create({
    template: 'base',
    cpuCount: 1,
    memoryMiB: 512,
    timeoutMs: 600_000,
    labels: { example: 'fix-failing-test' },
  }),
);
console.log(`  sandbox ${sandbox.id}`);
try {
  await step('upload project', async () => {
    for (const name of await readdir(projectDir)) {
      await sandbox.files.write(`${remoteDir}/${name}`, await readFile(join(projectDir, name)));
    }
  });

  const first = await step('run tests', () => sandbox.commands.run('python3 -m unittest -v', { cwd: remoteDir }));
  console.log(indent(first.stderr));
  if (first.exitCode === 0) throw new Error('expected the first test run to fail: the project ships a bug');

  await step('apply fix (write pricing.py)', async () => {
    const source = Buffer.from(await sandbox.files.read(`${remoteDir}/pricing.py`)).toString('utf8');
    const fixed = source
      .replace('    # Bug: the discount is added instead of subtracted.\n', '')
      .replace('return amount + amount * Decimal(percent) / 100', 'return amount - amount * Decimal(percent) / 100');
    if (fixed === source) throw new Error('the fix did not apply');
    await sandbox.files.write(`${remoteDir}/pricing.py`, fixed);
  });

  const second = await step('run tests again', () =>
    sandbox.commands.run('python3 -m unittest -v', { cwd: remoteDir }),
  );
  console.log(indent(second.stderr));
  if (second.exitCode !== 0) throw new Error(`tests still fail after the fix (exit ${second.exitCode})`);

  await step('write report in the sandbox', () =>
    sandbox.commands.run(['python3', 'report.py'], { cwd: remoteDir, check: true }),
  );
  const report = await step('download report', async () => {
    const bytes = await sandbox.files.read(`${remoteDir}/report.json`);
    await writeFile(reportPath, bytes);
    return JSON.parse(Buffer.from(bytes).toString('utf8')) as { testsRun: number; ok: boolean };
  });
  console.log(`  report: ${report.testsRun} tests, ok=${report.ok}, saved to ${reportPath}`);
} finally {
  await step('delete sandbox', () => sandbox.delete());
}
console.log('done: the agent fixed the failing test in an isolated sandbox');

function indent(text: string): string {
  return text
    .trimEnd()
    .split('\n')
    .map((l) => `    ${l}`)
    .join('\n');
}
