/**
 * Starts a REAL Burrow server in this process for end-to-end tests: temp data dir, the prebuilt base template in
 * /var/tmp/burrow-test-templates, a free port on loopback. Close it in afterAll; the data dir is removed.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Where the server helper builds the real base template once per machine. */
export const TEST_TEMPLATES_DIR = '/var/tmp/burrow-test-templates';

export interface TestServer {
  apiUrl: string;
  adminKey: string;
  dataDir: string;
  close(): Promise<void>;
}

interface ServerModule {
  loadConfig(env: Record<string, string | undefined>, overrides: Record<string, unknown>): unknown;
  startServer(config: unknown): Promise<{ close(): Promise<void> }>;
  setup(config: unknown, options: { onLog: (line: string) => void }): Promise<unknown>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}

/** Starts the server; the admin key comes from `<dataDir>/admin-key` (written by `setup` if the server does not). */
export async function startTestServer(): Promise<TestServer> {
  const specifier = '@burrow/server';
  const server = (await import(specifier)) as ServerModule;
  const dataDir = mkdtempSync(join(tmpdir(), 'burrow-e2e-'));
  const port = await freePort();
  const config = server.loadConfig(
    { BURROW_DATA_DIR: dataDir },
    { dataDir, host: '127.0.0.1', port, templatesDir: TEST_TEMPLATES_DIR },
  );
  let running: { close(): Promise<void> } | undefined;
  try {
    const keyFile = join(dataDir, 'admin-key');
    if (!existsSync(keyFile)) await server.setup(config, { onLog: () => {} });
    running = await server.startServer(config);
    const adminKey = readFileSync(keyFile, 'utf8').trim();
    const started = running;
    return {
      apiUrl: `http://127.0.0.1:${port}`,
      adminKey,
      dataDir,
      close: async () => {
        await started.close();
        rmSync(dataDir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await running?.close().catch(() => {});
    rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
}
