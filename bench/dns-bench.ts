/**
 * DNS lookup time for an allowed name through the sandbox resolver (policy check, a fresh upstream query,
 * onResolved, answer) against the same query sent straight to the authoritative server, both from the host to a
 * test internet made for the run. A lookup from inside a sandbox adds the sandbox's own network path on top.
 */
import { queryDns, startTestInternet } from '@burrow/runtime-gvisor/test-support';
import { startSandboxResolver } from '@burrow/server';
import { pino } from 'pino';
import { summarize, time } from './stats.js';

/** One bench row (same shape as run.ts's). */
export interface DnsRow {
  metric: string;
  ours: ReturnType<typeof summarize>;
  raw: ReturnType<typeof summarize> | null;
  ratio: number | null;
  target: string;
}

/**
 * Runs the DNS rows: `lookups` allowed lookups through the resolver, alternating with as many straight ones.
 * @returns the rows
 */
export async function benchDns(options: { lookups: number; log: (message: string) => void }): Promise<DnsRow[]> {
  const internet = await startTestInternet();
  const resolver = await startSandboxResolver({
    listenAddress: '127.0.0.1',
    port: 0,
    upstreams: [internet.dns],
    policyFor: () => ({ sandboxId: 'sbx_bench', mode: 'egress', allowOut: ['www.test'], denyOut: ['0.0.0.0/0'] }),
    onResolved: () => undefined,
    logger: pino({ level: 'silent' }),
  });
  try {
    options.log(`dns: ${options.lookups} lookups through the resolver and straight`);
    const ours: number[] = [];
    const straight: number[] = [];
    for (let i = 0; i < options.lookups; i++) {
      ours.push(
        await time(async () => {
          const answer = await queryDns({ server: resolver.address, port: resolver.port, name: 'www.test' });
          if (answer?.rcode !== 'NOERROR') throw new Error(`resolver answered ${answer?.rcode ?? 'nothing'}`);
        }),
      );
      straight.push(await time(() => queryDns({ ...internet.dns, server: internet.dns.address, name: 'www.test' })));
    }
    const o = summarize(ours);
    const r = summarize(straight);
    return [
      {
        metric: 'DNS lookup, allowed name, through the sandbox resolver (ms)',
        ours: o,
        raw: r,
        ratio: Math.round((o.p50 / r.p50) * 100) / 100,
        target: '—',
      },
    ];
  } finally {
    await resolver.close();
    await internet.close();
  }
}
