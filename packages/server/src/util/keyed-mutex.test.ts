import { expect, test } from 'vitest';
import { KeyedMutex } from './keyed-mutex.js';

test('serializes one key, runs different keys concurrently, releases on throw', async () => {
  const mutex = new KeyedMutex();
  const log: string[] = [];
  const slow = (key: string, name: string, ms: number) =>
    mutex.run(key, async () => {
      log.push(`${name}>`);
      await new Promise((r) => setTimeout(r, ms));
      log.push(`<${name}`);
    });
  await Promise.all([slow('a', 'a1', 30), slow('a', 'a2', 1), slow('b', 'b1', 5)]);
  expect(log.indexOf('<a1')).toBeLessThan(log.indexOf('a2>'));
  expect(log.indexOf('b1>')).toBeLessThan(log.indexOf('<a1'));
  await expect(mutex.run('a', async () => Promise.reject(new Error('x')))).rejects.toThrow('x');
  expect(await mutex.run('a', async () => 7)).toBe(7);
  expect(mutex.isBusy('a')).toBe(false);
});
