import { createSocket, type Socket } from 'node:dgram';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runCommand } from '../run-command.js';
import { resolverElements, SandboxNetworks, udpListeners } from './sandbox-network.js';

describe('resolver admission on the host (pure readers)', () => {
  it('reads the resolvers set from nft -j output, and nothing from output it cannot read', () => {
    const json = JSON.stringify({
      nftables: [
        { metainfo: { version: '1.0.6' } },
        {
          set: {
            name: 'resolvers',
            elem: [
              { concat: ['10.231.0.1', 'udp', 5353] },
              { concat: ['10.231.0.1', 'udp', 40000] },
              { concat: ['10.231.0.1', 'tcp', 40001] },
            ],
          },
        },
      ],
    });
    expect(resolverElements(json)).toEqual([
      { address: '10.231.0.1', port: 5353, protocol: 'udp' },
      { address: '10.231.0.1', port: 40000, protocol: 'udp' },
      { address: '10.231.0.1', port: 40001, protocol: 'tcp' },
    ]);
    expect(resolverElements('{"nftables":[{"set":{"name":"resolvers"}}]}')).toEqual([]);
    expect(resolverElements('not json')).toEqual([]);
  });

  it('reads bound UDP addresses from /proc/net/udp (hex, little-endian address)', () => {
    const text = [
      '   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops',
      '  101: 0100E70A:14E9 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0000000000000000 0',
      '  102: 00000000:9C40 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0000000000000000 0',
    ].join('\n');
    expect([...udpListeners(text)]).toEqual(['10.231.0.1:5353', '0.0.0.0:40000']);
  });

  it('reads TCP listeners (state 0A) from /proc/net/tcp and leaves out other states', () => {
    const text = [
      '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode',
      '   0: 0100E70A:9C41 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 588 1 0 100 0 0 10 0',
      '   1: 0100007F:E7DA 0100007F:9C29 06 00000000:00000000 03:00001609 00000000     0        0 0 3 0',
    ].join('\n');
    expect([...udpListeners(text, '0A')]).toEqual(['10.231.0.1:40001']);
  });
});

describe('resolver admission on the host (real nftables)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'burrow-resolver-admission-'));
  const sockets: Socket[] = [];
  afterAll(() => {
    for (const socket of sockets) socket.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function bind(address: string): Promise<number> {
    const socket = createSocket('udp4');
    sockets.push(socket);
    await new Promise<void>((resolve) => socket.bind(0, address, resolve));
    return socket.address().port;
  }

  async function admitted(): Promise<string[]> {
    const listed = await runCommand('nft', ['-j', 'list', 'set', 'inet', 'burrow_host', 'resolvers'], {
      timeoutMs: 30_000,
    });
    return resolverElements(listed.stdout).map((e) => `${e.address}:${e.port}`);
  }

  it('a server taking a resolver port drops admissions of ports nothing listens on, and keeps live ones', async () => {
    const networks = new SandboxNetworks({ instanceHash: 'admtest00000', sandboxDir: (id) => join(dir, id) });
    await networks.prepareHost();
    const gateway = networks.hostGateway();
    const live = await bind(gateway);
    await networks.useResolver({ address: gateway, port: live });
    // A port admitted for a server that died (nothing listens there now).
    const probe = createSocket('udp4');
    await new Promise<void>((resolve) => probe.bind(0, gateway, resolve));
    const dead = probe.address().port;
    await new Promise<void>((resolve) => probe.close(resolve));
    expect(readFileSync('/proc/net/udp', 'utf8')).not.toMatch(
      new RegExp(`:${dead.toString(16).toUpperCase().padStart(4, '0')} `),
    );
    await runCommand('nft', ['add', 'element', 'inet', 'burrow_host', 'resolvers', `{ ${gateway} . udp . ${dead} }`], {
      timeoutMs: 30_000,
    });
    expect(await admitted()).toContain(`${gateway}:${dead}`);

    const mine = await bind(gateway);
    await networks.useResolver({ address: gateway, port: mine });
    const after = await admitted();
    expect(after).not.toContain(`${gateway}:${dead}`);
    expect(after).toContain(`${gateway}:${live}`);
    expect(after).toContain(`${gateway}:${mine}`);
    await networks.forgetResolver({ address: gateway, port: live });
    await networks.forgetResolver({ address: gateway, port: mine });
  });
});
