import { mkdir, mkdtemp, open, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CheckpointRejectedError } from '@burrow/runtime';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  completeChecksums,
  describeImage,
  hashSparseFile,
  readManifest,
  type StateLocation,
  verifyState,
  writeManifest,
} from './checkpoint-files.js';

const RUNTIME = { runscVersion: 'runsc version test', platform: 'systrap' };

/** Pause images sealed with fingerprints only, checksummed later (no runsc: plain files stand in for the image). */
describe('deferred checksums of a pause image', () => {
  let dir: string;
  let location: StateLocation;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'burrow-checksums-test-'));
    location = {
      imageDir: join(dir, 'image'),
      diskPath: join(dir, 'disk.img'),
      manifestPath: join(dir, 'manifest.json'),
    };
    await mkdir(location.imageDir);
    await writeFile(join(location.imageDir, 'checkpoint.img'), Buffer.alloc(300_000, 7));
    await writeFile(join(location.imageDir, 'pages.img'), Buffer.alloc(2_000_000, 9));
    const disk = await open(location.diskPath, 'w');
    await disk.truncate(64 << 20);
    await disk.write(Buffer.from('ext4 stand-in'), 0, 13, 1 << 20);
    await disk.close();
  });

  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const seal = () =>
    writeManifest(location, { sandboxId: 'sbx_test', runtime: RUNTIME, memory: true, deferChecksums: true });

  it('seals without checksums, is accepted by fingerprints, and gets the same checksums as a hashing seal later', async () => {
    const sealed = await seal();
    expect(sealed.checksumsPending).toBe(true);
    expect([...sealed.image.map((f) => f.sha256), sealed.disk.sha256]).toEqual(['', '', '']);
    await verifyState(location, { runtime: RUNTIME, memory: true, sandboxId: 'sbx_test', trustFingerprints: true });
    expect(await completeChecksums(location)).toBe('done');
    const done = await readManifest(location);
    expect(done?.checksumsPending).toBeUndefined();
    expect(done?.image.map(({ name, sizeBytes, sha256 }) => ({ name, sizeBytes, sha256 }))).toEqual(
      await describeImage(location.imageDir),
    );
    expect(done?.disk.sha256).toBe(await hashSparseFile(location.diskPath));
    // Now the full check works too (a snapshot or fork point of it is verified by checksum).
    await verifyState(location, { runtime: RUNTIME, memory: true, sandboxId: 'sbx_test' });
  });

  it('a file changed before its checksum was taken is never checksummed, and the image is refused', async () => {
    await seal();
    const pages = join(location.imageDir, 'pages.img');
    const original = await readFile(pages);
    const flipped = Buffer.from(original);
    flipped[1000] = (flipped[1000] ?? 0) ^ 0xff;
    await writeFile(pages, flipped);
    expect(await completeChecksums(location)).toBe('changed');
    expect((await readManifest(location))?.checksumsPending).toBe(true);
    const verify = verifyState(location, { runtime: RUNTIME, memory: true, trustFingerprints: true });
    await expect(verify).rejects.toThrow(CheckpointRejectedError);
    await expect(verify).rejects.toThrow(/before its checksums were taken/);
    // Even with its original bytes back: what was sealed can no longer be proven.
    await writeFile(pages, original);
    await expect(verifyState(location, { runtime: RUNTIME, memory: true, trustFingerprints: true })).rejects.toThrow(
      /before its checksums were taken/,
    );
  });

  it('an aborted run leaves the manifest pending and untouched', async () => {
    await seal();
    const before = await readFile(location.manifestPath, 'utf8');
    const controller = new AbortController();
    controller.abort();
    await expect(completeChecksums(location, controller.signal)).rejects.toThrow();
    expect(await readFile(location.manifestPath, 'utf8')).toBe(before);
    expect(await completeChecksums(location)).toBe('done');
  });
});
