/**
 * A full sandbox disk over the real GvisorDriver (runsc, overlayfs on an ext4 loop disk): every writer in the sandbox
 * gets ENOSPC, an upload gets 507 `no_space`, and the SDK's next calls after that refused upload answer at once.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { GvisorDriver } from '@burrow/runtime-gvisor';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { Sandbox } from '../../packages/sdk/src/index.js';
import { type Burrow, createBurrow, loadConfig } from '../../packages/server/src/main.js';
import { GvisorTemplateBuilder } from '../../packages/server/src/node/gvisor-template-builder.js';

/** Base template cache shared by every real-runtime test. */
const TEMPLATES_DIR = '/var/tmp/burrow-test-templates';

describe('a full sandbox disk (real runsc)', () => {
  let burrow: Burrow;
  let driver: GvisorDriver;
  let dataDir = '';
  let url = '';
  let adminKey = '';
  let sandbox: Sandbox;

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'burrow-disk-full-'));
    const logger = pino({ level: process.env.BURROW_TEST_LOG ?? 'silent' });
    driver = new GvisorDriver({ dataDir, logger });
    burrow = await createBurrow(loadConfig({}, { dataDir, templatesDir: TEMPLATES_DIR, warmPool: [] }), {
      driver,
      templateBuilder: new GvisorTemplateBuilder({ templatesDir: TEMPLATES_DIR }),
      logger,
    });
    await burrow.services.templates.ensureBase();
    adminKey = (await burrow.services.keys.ensureAdminKey()) ?? '';
    url = await burrow.app.listen({ host: '127.0.0.1', port: 0 });
    sandbox = await Sandbox.create({ apiUrl: url, apiKey: adminKey, diskMiB: 64 });
    // Filled to the last block: 1 MiB writes, then 4 KiB, then single bytes.
    const fill = await sandbox.commands.run(
      'dd if=/dev/zero of=/root/fill1 bs=1M 2>/dev/null; dd if=/dev/zero of=/root/fill2 bs=4096 2>/dev/null; ' +
        'dd if=/dev/zero of=/root/fill3 bs=1 2>/dev/null; df -k /root | tail -1',
    );
    expect(fill.stdout.trim().split(/\s+/)[3]).toBe('0');
  });
  afterAll(async () => {
    await sandbox?.delete().catch((e: unknown) => console.error('cleanup failed', e));
    await burrow?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  test('every writer gets ENOSPC (dash builtins print it as "I/O error", as on any Linux host)', async () => {
    const python = await sandbox.commands.run(
      `python3 -c "import os; fd = os.open('/root/new', os.O_WRONLY | os.O_CREAT | os.O_TRUNC); os.write(fd, b'x')"`,
    );
    expect(python.stderr).toContain('[Errno 28] No space left on device');
    const echo = await sandbox.commands.run('/bin/echo x > /root/by-echo; echo x | tee /root/by-tee');
    expect(echo.stderr).toContain('/bin/echo: write error: No space left on device');
    expect(echo.stderr).toContain('tee: /root/by-tee: No space left on device');
    // The shell's own builtin loses errno in its message (dash; `dash -c 'echo x > /dev/full'` on the host says the
    // same); its exit status is still 1.
    const builtin = await sandbox.commands.run('echo x > /root/by-builtin');
    expect(builtin.exitCode).toBe(1);
    expect(builtin.stderr).toContain('echo: I/O error');
  });

  test('an upload gets 507 no_space, and 20 SDK calls right after it answer at once', async () => {
    const chunk = Buffer.alloc(1024 * 1024, 1);
    const upload = Readable.from(
      (function* () {
        for (let i = 0; i < 4; i++) yield chunk;
      })(),
    );
    await expect(sandbox.files.write('/root/upload.bin', upload)).rejects.toMatchObject({ code: 'no_space' });
    for (let i = 0; i < 20; i++) {
      const call = i % 2 === 0 ? sandbox.files.exists('/root/fill1') : sandbox.files.list('/root');
      const late = new Promise((_, reject) => setTimeout(() => reject(new Error(`call ${i} hung`)), 10_000).unref());
      await Promise.race([call, late]);
    }
  });
});
