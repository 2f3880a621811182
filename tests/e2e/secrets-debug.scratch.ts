import { startTestInternet } from '@burrow/runtime-gvisor/test-support';
import { Sandbox } from '@burrow/sdk';
import { startTestServer } from './burrow-test-server.js';
const log = (...a: unknown[]) => console.log(new Date().toISOString().slice(11, 19), ...a);
const internet = await startTestInternet({ records: { 'api.test': ['@1'], 'other.test': ['@2'] } });
const server = await startTestServer({ env: { BURROW_DNS_UPSTREAM: `${internet.dns.address}:${internet.dns.port}`, BURROW_EGRESS_UPSTREAM_CA: internet.tls.caCertPath } });
log('server', server.apiUrl);
let sandbox: Sandbox | undefined;
try {
  const put = await fetch(`${server.apiUrl}/v1/secrets/API_KEY`, { method: 'PUT', headers: { authorization: `Bearer ${server.adminKey}`, 'content-type': 'application/json' }, body: JSON.stringify({ value: 'sk-real-1234', hosts: ['api.test'], header: 'Authorization', format: 'Bearer {value}' }) });
  log('put', put.status, await put.text());
  sandbox = await Sandbox.create({ apiUrl: server.apiUrl, apiKey: server.adminKey, secrets: [{ name: 'API_KEY', env: 'OPENAI_API_KEY' }] });
  log('created', sandbox.id);
  for (const script of ['echo $OPENAI_API_KEY; env | grep -i cert', 'tail -3 /etc/ssl/certs/ca-certificates.crt', 'getent hosts api.test', 'curl -sv -m 10 https://api.test/digest 2>&1 | tail -20', 'curl -sv -m 10 http://api.test/digest 2>&1 | tail -5']) {
    const r = await sandbox.commands.run(['/bin/sh', '-c', script], { timeoutMs: 30_000 });
    log(script, '\n', r.stdout, r.stderr);
  }
} catch (e) { log('ERR', e); }
finally {
  await sandbox?.delete().catch(() => {});
  await server.close();
  await internet.close();
}
