import { join } from 'node:path';
import type { RuntimeDriver } from '@burrow/runtime';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import type { Services } from '../../services/services.js';
import type { SandboxStore } from '../../store/sandbox-store.js';
import { buildE2bApiApp } from './e2b-api-app.js';
import { loadTokenSecret, sandboxDefaults } from './e2b-tokens.js';
import { buildEnvdApp } from './envd-app.js';

/** The E2B-compatible control plane and envd, each a fastify app of its own (not listening). */
export interface E2bServers {
  api: FastifyInstance;
  envd: FastifyInstance;
  /** The envd access token of a sandbox. */
  accessToken: (sandboxId: string) => string;
  /**
   * Listen on `apiPort` and `envdPort` (0 picks a free port each).
   * @returns both base URLs
   * @throws Error when a port is taken (EADDRINUSE)
   */
  listen(host: string, apiPort: number, envdPort: number): Promise<{ apiUrl: string; envdUrl: string }>;
  close(): Promise<void>;
}

/**
 * Build the E2B servers over Burrow's services. The envd token secret lives in `<dataDir>/e2b-secret`.
 * @throws Error when the secret cannot be read or created
 */
export async function buildE2bServers(deps: {
  services: Services;
  sandboxes: SandboxStore;
  driver: RuntimeDriver;
  dataDir: string;
  logger: Logger;
}): Promise<E2bServers> {
  const accessToken = await loadTokenSecret(join(deps.dataDir, 'e2b-secret'));
  const logger = deps.logger.child({ component: 'e2b' });
  const api = await buildE2bApiApp({ services: deps.services, logger, accessToken });
  const envd = await buildEnvdApp({
    services: deps.services,
    logger,
    accessToken,
    lookup: (id) => deps.sandboxes.getAcrossTenants(id),
    listRunning: async () => (await deps.sandboxes.listAcrossTenants()).filter((r) => r.state === 'running'),
    defaults: sandboxDefaults(deps.driver),
  });
  return {
    api,
    envd,
    accessToken,
    async listen(host, apiPort, envdPort) {
      const apiUrl = await api.listen({ host, port: apiPort });
      const envdUrl = await envd.listen({ host, port: envdPort });
      return { apiUrl, envdUrl };
    },
    async close() {
      await api.close();
      await envd.close();
    },
  };
}
