import { readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { buildApp } from './http/app.js';
import type { Services } from './services/services.js';

/** The committed OpenAPI document, relative to this file in `dist/`. */
const DEFAULT_OUT = fileURLToPath(new URL('../../../docs/openapi.json', import.meta.url));

/**
 * The OpenAPI 3.1 document of the API, as formatted JSON with a final newline.
 * @example
 * const text = await renderOpenApi();
 */
export async function renderOpenApi(): Promise<string> {
  // Handlers never run while the document is generated, so no service is needed behind the routes.
  const services = { driverName: 'gvisor' } as unknown as Services;
  const app = await buildApp({ services, logger: pino({ level: 'silent' }) });
  await app.ready();
  const doc = app.swagger();
  await app.close();
  return `${JSON.stringify(doc, null, 2)}\n`;
}

/** `node dist/write-openapi.js [--check] [--out <file>]`: write the document, or with --check exit 1 if it differs. */
async function main(argv: string[]): Promise<number> {
  const outAt = argv.indexOf('--out');
  const out = outAt >= 0 && argv[outAt + 1] !== undefined ? (argv[outAt + 1] ?? DEFAULT_OUT) : DEFAULT_OUT;
  const text = await renderOpenApi();
  if (argv.includes('--check')) {
    const committed = await readFile(out, 'utf8').catch(() => '');
    if (committed !== text) {
      process.stderr.write(`${out} is out of date: run \`npm run openapi -w @burrow/server\` and commit it\n`);
      return 1;
    }
    process.stderr.write(`${out} is up to date\n`);
    return 0;
  }
  await writeFile(out, text);
  process.stderr.write(`wrote ${out}\n`);
  return 0;
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
      process.exitCode = 1;
    },
  );
}
