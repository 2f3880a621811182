import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GvisorDriver } from '@burrow/runtime-gvisor';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Burrow, createBurrow, loadConfig } from '../../packages/server/src/main.js';
import { GvisorTemplateBuilder } from '../../packages/server/src/node/gvisor-template-builder.js';

/** Base template cache shared by every real-runtime test: built once (about a minute), a cache hit afterwards. */
const TEMPLATES_DIR = '/var/tmp/burrow-test-templates';

describe('API over the real GvisorDriver', () => {
  let burrow: Burrow;
  let driver: GvisorDriver;
  let dataDir = '';
  let admin: Record<string, string> = {};
  const created: string[] = [];

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'burrow-real-'));
    const logger = pino({ level: process.env.BURROW_TEST_LOG ?? 'silent' });
    driver = new GvisorDriver({ dataDir, logger });
    burrow = await createBurrow(loadConfig({}, { dataDir, templatesDir: TEMPLATES_DIR }), {
      driver,
      templateBuilder: new GvisorTemplateBuilder({ templatesDir: TEMPLATES_DIR }),
      logger,
    });
    await burrow.services.templates.ensureBase();
    admin = { authorization: `Bearer ${await burrow.services.keys.ensureAdminKey()}` };
  });
  afterAll(async () => {
    for (const id of created)
      await driver.delete(id).catch((e: unknown) => console.error(`cleanup of ${id} failed`, e));
    await burrow?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  test('create, exec python, files round trip, delete verified on the host', async () => {
    const t0 = performance.now();
    const res = await burrow.app.inject({
      method: 'POST',
      url: '/v1/sandboxes',
      headers: admin,
      payload: { memoryMiB: 256, diskMiB: 256 },
    });
    expect(res.statusCode, res.body).toBe(201);
    const id = res.json().id as string;
    created.push(id);
    const createMs = performance.now() - t0;
    console.log(`[real-runtime] ${id} create ${createMs.toFixed(0)} ms`);

    const t1 = performance.now();
    const exec = await burrow.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/exec`,
      headers: admin,
      payload: { cmd: "python3 -c 'print(6*7)'" },
    });
    expect(exec.statusCode, exec.body).toBe(200);
    expect(Buffer.from(exec.json().stdout, 'base64').toString()).toBe('42\n');
    expect(exec.json().exitCode).toBe(0);
    console.log(`[real-runtime] exec python3 ${(performance.now() - t1).toFixed(0)} ms`);

    const put = await burrow.app.inject({
      method: 'PUT',
      url: `/v1/sandboxes/${id}/files/content?path=${encodeURIComponent('/root/hello.txt')}`,
      headers: { ...admin, 'content-type': 'application/octet-stream' },
      payload: Buffer.from('from the API\n'),
    });
    expect(put.statusCode, put.body).toBe(200);
    const cat = await burrow.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/exec`,
      headers: admin,
      payload: { cmd: ['cat', '/root/hello.txt'] },
    });
    expect(Buffer.from(cat.json().stdout, 'base64').toString()).toBe('from the API\n');
    await burrow.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/exec`,
      headers: admin,
      payload: { cmd: 'echo inside > /root/made.txt' },
    });
    const read = await burrow.app.inject({
      method: 'GET',
      url: `/v1/sandboxes/${id}/files/content?path=${encodeURIComponent('/root/made.txt')}`,
      headers: admin,
    });
    expect(read.body).toBe('inside\n');

    const t2 = performance.now();
    const del = await burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${id}`, headers: admin });
    expect(del.statusCode, del.body).toBe(204);
    console.log(`[real-runtime] delete ${(performance.now() - t2).toFixed(0)} ms`);
    expect((await driver.listHostResources()).sandboxIds).not.toContain(id);
    expect((await burrow.app.inject({ method: 'GET', url: `/v1/sandboxes/${id}`, headers: admin })).statusCode).toBe(
      404,
    );
  });
});
