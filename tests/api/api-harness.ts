import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Logger, pino } from 'pino';
import { DEFAULT_HTTP_LIMITS, type HttpLimits } from '../../packages/server/src/http/http-limits.js';
import { type Burrow, createBurrow, loadConfig } from '../../packages/server/src/main.js';
import { FakeDriver } from '../../packages/server/src/testing/fake-driver.js';
import { FakeTemplateBuilder } from '../../packages/server/src/testing/fake-template-builder.js';
import type { Clock } from '../../packages/server/src/util/clock.js';

/** A server over real SQLite in a temp dataDir, with the FAKE driver and builder (fast layer). */
export interface Harness {
  burrow: Burrow;
  driver: FakeDriver;
  builder: FakeTemplateBuilder;
  dataDir: string;
  adminSecret: string;
  /** Headers carrying the admin key. */
  admin: Record<string, string>;
  close(): Promise<void>;
}

export async function startHarness(
  options: {
    bodyLimitBytes?: number;
    orphanGraceMs?: number;
    clock?: Clock;
    httpLimits?: Partial<HttpLimits>;
    logger?: Logger;
  } = {},
): Promise<Harness> {
  const dataDir = await mkdtemp(join(tmpdir(), 'burrow-api-'));
  const driver = new FakeDriver(join(dataDir, 'fake-sandboxes'));
  const builder = new FakeTemplateBuilder(join(dataDir, 'fake-templates'));
  const config = loadConfig(
    {},
    {
      dataDir,
      // Orphans are reaped on the first pass here; the grace period has its own tests.
      orphanGraceMs: options.orphanGraceMs ?? 0,
      ...(options.bodyLimitBytes === undefined ? {} : { bodyLimitBytes: options.bodyLimitBytes }),
      ...(options.httpLimits === undefined ? {} : { httpLimits: { ...DEFAULT_HTTP_LIMITS, ...options.httpLimits } }),
    },
  );
  const burrow = await createBurrow(config, {
    driver,
    templateBuilder: builder,
    logger: options.logger ?? pino({ level: process.env.BURROW_TEST_LOG ?? 'silent' }),
    ...(options.clock === undefined ? {} : { clock: options.clock }),
    capacity: { cpuCount: () => 2, memoryMiB: () => 4096, freeDiskMiB: async () => 100_000 },
  });
  await burrow.services.templates.ensureBase();
  const adminSecret = (await burrow.services.keys.ensureAdminKey()) ?? '';
  await burrow.app.ready();
  return {
    burrow,
    driver,
    builder,
    dataDir,
    adminSecret,
    admin: { authorization: `Bearer ${adminSecret}` },
    close: async () => {
      await driver.close();
      await burrow.close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
