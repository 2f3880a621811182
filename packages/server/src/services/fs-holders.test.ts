import type { RuntimeDriver } from '@burrow/runtime';
import { describe, expect, test } from 'vitest';
import { FsHolders, releasingDriver } from './fs-holders.js';

/** A stand-in driver recording calls (not a RuntimeDriver implementation: only what the proxy touches). */
function recordingDriver(log: string[]) {
  return {
    name: 'recording',
    pause: async (id: string) => {
      log.push(`pause ${id}`);
      return { id };
    },
    stop: async (id: string) => void log.push(`stop ${id}`),
    delete: async (id: string) => void log.push(`delete ${id}`),
    rootDir: (id: string) => `/x/${id}`,
  } as unknown as RuntimeDriver;
}

describe('FsHolders and releasingDriver', () => {
  test('pause, stop and delete release the sandbox holders first and wait for them; other verbs do not', async () => {
    const log: string[] = [];
    const holders = new FsHolders();
    const driver = releasingDriver(recordingDriver(log), holders);
    const holder = (name: string) => async () => {
      await new Promise((resolve) => setTimeout(resolve, 20));
      log.push(`released ${name}`);
    };
    holders.hold('a', holder('a1'));
    holders.hold('a', holder('a2'));
    holders.hold('b', holder('b1'));
    expect(driver.rootDir('a')).toBe('/x/a');
    expect(log).toEqual([]);
    await driver.pause('a');
    expect(log).toEqual(['released a1', 'released a2', 'pause a']);
    expect(holders.count('a')).toBe(0);
    expect(holders.count('b')).toBe(1);
    await driver.delete('b');
    expect(log.slice(3)).toEqual(['released b1', 'delete b']);
    await driver.stop('b'); // nothing left to release
    expect(log.at(-1)).toBe('stop b');
  });

  test('a holder that closed on its own is not released again; a failing release does not stop the verb', async () => {
    const log: string[] = [];
    const holders = new FsHolders();
    const driver = releasingDriver(recordingDriver(log), holders);
    const unhold = holders.hold('a', async () => void log.push('released'));
    unhold();
    holders.hold('a', async () => {
      throw new Error('already closed');
    });
    await driver.stop('a');
    expect(log).toEqual(['stop a']);
  });
});
