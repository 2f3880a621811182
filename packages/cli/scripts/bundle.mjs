// Bundles the built CLI (dist/) into bundle/: one file for what every command loads, and a chunk per lazily loaded
// part. Node 20's ESM loader spends about 1-1.5 ms of CPU per module it resolves and loads; the CLI's start path
// crosses ~45 modules of ours and of the SDK and contract, which the bundle makes one (docs/performance.md,
// "CLI start"). The server and its native modules stay outside: `burrow server` loads them from node_modules.
import { chmod } from 'node:fs/promises';
import { build } from 'esbuild';

const outdir = new URL('../bundle/', import.meta.url).pathname;
await build({
  entryPoints: [new URL('../dist/bin.js', import.meta.url).pathname],
  outdir,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  external: ['@burrow/server', 'better-sqlite3', 'pg'],
  // Bundled CommonJS (commander, ws through the SDK's lazy require) calls `require`, which ESM lacks.
  banner: {
    js: "import { createRequire as __burrowRequire } from 'node:module'; const require = __burrowRequire(import.meta.url);",
  },
  logLevel: 'warning',
});
await chmod(`${outdir}bin.js`, 0o755);
