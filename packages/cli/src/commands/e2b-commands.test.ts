import { describe, expect, it } from 'vitest';
import { e2bEnvLines } from './e2b-commands.js';

describe('e2bEnvLines', () => {
  it('uses the Burrow host with the default E2B ports', () => {
    expect(e2bEnvLines({ apiUrl: 'http://10.0.0.5:7420', apiKey: 'bk_x', env: {} })).toBe(
      'export E2B_API_URL=http://10.0.0.5:49982\nexport E2B_SANDBOX_URL=http://10.0.0.5:49983\nexport E2B_API_KEY=bk_x\n',
    );
  });
  it('takes the ports from the environment and defaults the URL to loopback', () => {
    const lines = e2bEnvLines({
      apiUrl: undefined,
      apiKey: 'bk_y',
      env: { BURROW_E2B_API_PORT: '3000', BURROW_E2B_ENVD_PORT: '3001' },
    });
    expect(lines).toContain('E2B_API_URL=http://127.0.0.1:3000\n');
    expect(lines).toContain('E2B_SANDBOX_URL=http://127.0.0.1:3001\n');
  });
  it('refuses without a key', () => {
    expect(() => e2bEnvLines({ apiUrl: undefined, apiKey: undefined, env: {} })).toThrow(/no API key/);
  });
});
