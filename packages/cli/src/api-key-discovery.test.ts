import { describe, expect, it } from 'vitest';
import { discoverApiKey } from './api-key-discovery.js';

const files = (contents: Record<string, string>) => (path: string) => {
  const content = contents[path];
  if (content === undefined) throw Object.assign(new Error(`ENOENT: ${path}`), { code: 'ENOENT' });
  return content;
};

describe('discoverApiKey', () => {
  const adminFile = { '/var/lib/burrow/admin-key': 'bk_admin\n', '/srv/b/admin-key': 'bk_custom\n' };

  it('prefers --api-key', () => {
    expect(discoverApiKey({ flag: 'bk_flag', env: { BURROW_API_KEY: 'bk_env' }, readFile: files(adminFile) })).toEqual({
      apiKey: 'bk_flag',
      source: '--api-key',
    });
  });

  it('then BURROW_API_KEY', () => {
    expect(
      discoverApiKey({ flag: undefined, env: { BURROW_API_KEY: 'bk_env' }, readFile: files(adminFile) })?.apiKey,
    ).toBe('bk_env');
  });

  it('then the admin key file of the default data dir, trimmed', () => {
    expect(discoverApiKey({ flag: undefined, env: {}, readFile: files(adminFile) })).toEqual({
      apiKey: 'bk_admin',
      source: '/var/lib/burrow/admin-key',
    });
  });

  it('uses BURROW_DATA_DIR for the file', () => {
    expect(
      discoverApiKey({ flag: undefined, env: { BURROW_DATA_DIR: '/srv/b' }, readFile: files(adminFile) })?.apiKey,
    ).toBe('bk_custom');
  });

  it('returns undefined when nothing is set and the file is unreadable or empty', () => {
    expect(discoverApiKey({ flag: undefined, env: { BURROW_API_KEY: '' }, readFile: files({}) })).toBeUndefined();
    expect(
      discoverApiKey({ flag: '', env: {}, readFile: files({ '/var/lib/burrow/admin-key': '  \n' }) }),
    ).toBeUndefined();
  });
});
