import { chmod, mkdir, mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { createBurrow, loadConfig, startServer } from './main.js';
import { FakeDriver } from './testing/fake-driver.js';
import { FakeTemplateBuilder } from './testing/fake-template-builder.js';

/** Fast layer: real SQLite and file system, the FAKE driver and template builder. */
describe('data dir permissions', () => {
  let parent = '';
  afterEach(async () => {
    if (parent !== '') await rm(parent, { recursive: true, force: true });
  });

  it('closes a data dir made beforehand with 0755 to other host users, and makes a new one 0700', async () => {
    parent = await mkdtemp(join(tmpdir(), 'burrow-datadir-'));
    for (const [name, premade] of [
      ['premade', true],
      ['fresh', false],
    ] as const) {
      const dataDir = join(parent, name);
      if (premade) {
        await mkdir(dataDir, { mode: 0o755 });
        expect((await stat(dataDir)).mode & 0o777).toBe(0o755);
      }
      const driver = new FakeDriver(join(parent, `${name}-sandboxes`));
      const burrow = await createBurrow(loadConfig({}, { dataDir, warmPool: [] }), {
        driver,
        templateBuilder: new FakeTemplateBuilder(join(parent, `${name}-templates`)),
        logger: pino({ level: 'silent' }),
      });
      try {
        expect((await stat(dataDir)).mode & 0o777).toBe(0o700);
      } finally {
        await burrow.close();
        await driver.close();
      }
    }
  });

  it('refuses a shared data dir (world-writable or sticky, as /tmp) and leaves its mode alone', async () => {
    parent = await mkdtemp(join(tmpdir(), 'burrow-datadir-'));
    for (const mode of [0o1777, 0o777, 0o1755]) {
      const dataDir = join(parent, `shared-${mode.toString(8)}`);
      await mkdir(dataDir);
      await chmod(dataDir, mode);
      await expect(
        createBurrow(loadConfig({}, { dataDir, warmPool: [] }), {
          driver: new FakeDriver(join(parent, 'fake-sandboxes')),
          templateBuilder: new FakeTemplateBuilder(join(parent, 'fake-templates')),
          logger: pino({ level: 'silent' }),
        }),
      ).rejects.toThrow(/is shared .*directory of its own/);
      expect((await stat(dataDir)).mode & 0o7777).toBe(mode);
    }
  });

  it('lets one server at a time use a data dir, and frees it when that server closes', async () => {
    parent = await mkdtemp(join(tmpdir(), 'burrow-datadir-'));
    const dataDir = join(parent, 'data');
    const start = () => {
      const driver = new FakeDriver(join(parent, 'fake-sandboxes'));
      return startServer(
        loadConfig({}, { dataDir, warmPool: [], port: 0, host: '127.0.0.1', e2b: { apiPort: 0, envdPort: 0 } }),
        {
          driver,
          templateBuilder: new FakeTemplateBuilder(join(parent, 'fake-templates')),
          logger: pino({ level: 'silent' }),
        },
      );
    };
    const first = await start();
    try {
      // Refused before it opens the database: the message names the holder.
      await expect(start()).rejects.toThrow(
        new RegExp(`another Burrow server \\(pid ${process.pid}\\) uses the data dir`),
      );
    } finally {
      await first.close();
    }
    const again = await start();
    await again.close();
  });
});
