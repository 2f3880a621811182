import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { inspectOverlayUpper } from './disk-inspect.js';

describe('inspectOverlayUpper (host directories standing in for an overlay)', () => {
  let dir = '';
  afterEach(async () => {
    if (dir !== '') await rm(dir, { recursive: true, force: true });
    dir = '';
  });

  it("lists the sandbox's own changes, not Burrow's agent mount point or upload staging, but counts their bytes", async () => {
    // `/.burrow-agent` (the exec agent's mount point) is Burrow's, not a file the sandbox added since its
    // template: `burrow inspect` must not list it.
    dir = await mkdtemp(join(tmpdir(), 'burrow-inspect-test-'));
    const lower = join(dir, 'lower');
    const upper = join(dir, 'upper');
    await mkdir(join(lower, 'root'), { recursive: true });
    await writeFile(join(lower, 'root', '.profile'), 'old\n');
    await mkdir(join(upper, 'root'), { recursive: true });
    await writeFile(join(upper, 'root', 'hi.py'), 'print("hi")\n');
    await writeFile(join(upper, 'root', '.profile'), 'new\n');
    await mkdir(join(upper, '.burrow-agent'));
    await mkdir(join(upper, '.burrow-tmp'));
    await writeFile(join(upper, '.burrow-tmp', '.upload-1'), Buffer.alloc(8192, 1));

    const result = await inspectOverlayUpper(upper, lower, {
      template: { id: 't', rootfsDir: lower },
      maxChanges: 100,
      maxDepth: 2,
      maxDirectories: 20,
      limitBytes: 1 << 30,
    });
    expect(result.changes.map((c) => `${c.kind} ${c.path}`)).toEqual(['modified /root/.profile', 'added /root/hi.py']);
    expect(result.counts).toEqual({ added: 1, modified: 1, deleted: 0 });
    // The staged upload still occupies the sandbox's disk.
    expect(result.usedBytes).toBeGreaterThanOrEqual(8192);
  });
});
