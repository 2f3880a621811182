/**
 * Starts a REAL Burrow server in this process for end-to-end tests: temp data dir, the prebuilt base template in
 * /var/tmp/burrow-test-templates, a free port on loopback (port 0). Close it in afterAll; the data dir is removed.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Where the server helper builds the real base template once per machine. */
export const TEST_TEMPLATES_DIR = '/var/tmp/burrow-test-templates';

export interface TestServer {
  apiUrl: string;
  /** Base URLs of the E2B control plane and envd (free ports). */
  e2b: { apiUrl: string; envdUrl: string };
  adminKey: string;
  dataDir: string;
  close(): Promise<void>;
}

/**
 * Starts the server; the admin key comes from `<dataDir>/admin-key` (written by `setup` if the server does not).
 * @param options.e2bBase also build (or find cached) the `e2b-base` template. @default false
 * @param options.env adds server settings (for example `BURROW_DNS_UPSTREAM`).
 */
export async function startTestServer(
  options: { e2bBase?: boolean; env?: Record<string, string> } = {},
): Promise<TestServer> {
  const server = await import('@burrow/server');
  const dataDir = mkdtempSync(join(tmpdir(), 'burrow-e2e-'));
  const config = server.loadConfig(
    { ...options.env, BURROW_DATA_DIR: dataDir },
    // No warm pool: its sandboxes would outlive close() (a server restart re-adopts them) and the data dir.
    {
      dataDir,
      host: '127.0.0.1',
      port: 0,
      e2b: { apiPort: 0, envdPort: 0 },
      templatesDir: TEST_TEMPLATES_DIR,
      logLevel: 'warn',
      warmPool: [],
    },
  );
  let running: Awaited<ReturnType<typeof server.startServer>> | undefined;
  try {
    const keyFile = join(dataDir, 'admin-key');
    // setup registers the base template (found in the shared cache) and writes the admin key.
    if (!existsSync(keyFile)) await server.setup(config, { onLog: () => {}, e2b: options.e2bBase === true });
    running = await server.startServer(config);
    const adminKey = readFileSync(keyFile, 'utf8').trim();
    const started = running;
    return {
      apiUrl: started.url,
      e2b: started.e2b ?? { apiUrl: '', envdUrl: '' },
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
