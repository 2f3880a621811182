import preact from '@preact/preset-vite';
import { defineConfig } from 'vite';

// The console is static files that `burrow server` serves at `/` (packages/server/src/http/console-routes.ts).
export default defineConfig({
  plugins: [preact()],
  build: { outDir: 'dist', emptyOutDir: true, target: 'es2022', sourcemap: false, reportCompressedSize: true },
  server: { proxy: { '/v1': { target: 'http://127.0.0.1:7420', ws: true }, '/console': 'http://127.0.0.1:7420' } },
});
