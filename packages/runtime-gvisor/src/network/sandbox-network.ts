import { createHash } from 'node:crypto';
import { access, mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { NetworkPolicy, NetworkUsage } from '@burrow/contract';
import { RuntimeError } from '@burrow/runtime';
import { runCommand } from '../run-command.js';
import { type EgressProxyEndpoint, interceptAddressesScript, interceptRules } from './egress-intercept-rules.js';
import { ingressHostRules } from './ingress-rules.js';
import {
  GATEWAY_MAC,
  GUEST_ADDRESS,
  GUEST_GATEWAY,
  GUEST_LINK,
  GUEST_MAC,
  GUEST_PREFIX_LENGTH,
  HOST_LINK_PREFIX,
  HOST_TABLE,
  hostRules,
  ipv4ToNumber,
  numberToIpv4,
  type ResolverEndpoint,
  ROUTER_GUEST_LINK,
  ROUTER_TABLE,
  ROUTER_UPLINK,
  routerRules,
} from './network-rules.js';

/** Where network namespaces are named (`ip netns`). */
const NETNS_DIR = '/run/netns';
/**
 * The host link that holds the network's host gateway address (the resolver's default address): loopback, which
 * every kernel has (this one has no dummy links); the host answers the routers' ARP for it on their links.
 */
export const HOST_GATEWAY_LINK = 'lo';
/** Default address pool of the sandboxes' uplinks (one address each; the first two are the network and gateway). */
export const DEFAULT_POOL_CIDR = '10.231.0.0/16';
/** Default UDP port of the sandboxes' resolver on the host gateway. */
export const DEFAULT_RESOLVER_PORT = 5353;

/** A sandbox's policy with nothing allowed. */
export const NO_NETWORK: NetworkPolicy = { mode: 'none', allowOut: [], denyOut: [] };

/** Options of {@link SandboxNetworks}. */
export interface SandboxNetworksOptions {
  /** Short hash naming one driver instance's namespaces (its cgroup parent hash). */
  instanceHash: string;
  /** Where each sandbox's `network.json` (its slot and policy) is kept: the sandbox's host dir. */
  sandboxDir(sandboxId: string): string;
  /** Uplink address pool, an IPv4 CIDR of /16 to /24. @default {@link DEFAULT_POOL_CIDR} */
  poolCidr?: string | undefined;
  /** Where guest DNS (UDP 53 to the gateway) is sent. @default `{ address: <pool's host gateway>, port: 5353 }` */
  resolver?: ResolverEndpoint | undefined;
  /** CIDRs no sandbox may reach whatever its policy (the operator's `BURROW_NETWORK_NEVER`). @default [] */
  never?: readonly string[] | undefined;
  /** Egress limit of sandboxes whose policy names none, Mbit/s. @default none */
  defaultEgressMbps?: number | undefined;
  /** Directory of the host-wide slot files (one per address in use, by every instance). @default '/run/burrow/net-slots' */
  slotDir?: string | undefined;
}

/** What {@link SandboxNetworks.sandboxForSourceAddress} finds. */
export interface SandboxNetworkIdentity {
  sandboxId: string;
  /** The policy last applied to the sandbox. */
  policy: NetworkPolicy;
}

interface NetworkRecord {
  slot: number;
  policy: NetworkPolicy;
}

/**
 * Per-sandbox networks on the host for `runsc --network=sandbox`. Each sandbox has two namespaces:
 * - the guest's (`burrow-<hash>-<id>-g`), where runsc runs and takes over its only link `eth0`, always
 *   {@link GUEST_ADDRESS}/30 with gateway {@link GUEST_GATEWAY} and fixed MACs, so an image restores anywhere;
 * - its router's (`…-r`), which translates the guest to the sandbox's own uplink address from the pool, sends guest
 *   DNS to the resolver, and enforces the sandbox's egress policy in nftables (one table, replaced atomically).
 *
 * The router's uplink pairs with a host link `bw<13 hex>`; the host holds the pool's gateway address on loopback, routes each sandbox's address to its link, denies every sandbox link the host itself (except the
 * resolver) and each other, and masquerades what leaves. Slots are host-wide files, so instances on one host
 * never share an address.
 */
export class SandboxNetworks {
  readonly poolCidr: string;
  private resolverEndpoint: ResolverEndpoint;
  private readonly poolBase: number;
  private readonly poolSize: number;
  private readonly slotDir: string;
  private readonly never: readonly string[];
  private hostReady: Promise<void> | undefined;
  private egressProxyEndpoint: EgressProxyEndpoint | undefined;

  constructor(private readonly options: SandboxNetworksOptions) {
    this.poolCidr = options.poolCidr ?? DEFAULT_POOL_CIDR;
    const [base, prefix] = this.poolCidr.split('/') as [string, string];
    const length = Number(prefix);
    if (!(length >= 16 && length <= 24)) throw new RuntimeError(`the network pool ${this.poolCidr} must be /16 to /24`);
    this.poolBase = ipv4ToNumber(base);
    this.poolSize = 2 ** (32 - length);
    this.resolverEndpoint = options.resolver ?? { address: this.hostGateway(), port: DEFAULT_RESOLVER_PORT };
    this.slotDir = options.slotDir ?? '/run/burrow/net-slots';
    this.never = [...(options.never ?? []), this.poolCidr];
  }

  /** Where guest DNS goes (UDP): the options' `resolver`, or the endpoint last given to {@link useResolver}. */
  get resolver(): ResolverEndpoint {
    return this.resolverEndpoint;
  }

  /**
   * Send guest DNS to `endpoint` from here on: the host admits sandbox links to it, and the routers of this
   * instance's sandboxes that exist (paused or running across a server restart) are re-applied with it. A server
   * binds its resolver on a port of its own and calls this before it serves, so servers on one host never share one.
   * @returns ids of sandboxes whose router could not be re-applied (they get the endpoint at their next start)
   * @throws RuntimeError when the host rules cannot be set
   */
  async useResolver(endpoint: ResolverEndpoint): Promise<string[]> {
    this.resolverEndpoint = { ...endpoint };
    await this.prepareHost();
    await this.pruneResolvers();
    await run('nft', [
      ...['add', 'element', 'inet', HOST_TABLE, 'resolvers'],
      `{ ${endpoint.address} . udp . ${endpoint.port} }`,
    ]);
    const failed: string[] = [];
    for (const sandboxId of await this.sandboxIds()) {
      const record = await this.readRecord(sandboxId);
      if (record === null || !(await exists(join(NETNS_DIR, this.netnsName(sandboxId, 'r'))))) continue;
      await this.apply(sandboxId, record.slot, record.policy, false).catch(() => failed.push(sandboxId));
    }
    return failed;
  }

  /**
   * Send guest HTTP and HTTPS to intercepted addresses ({@link interceptAddresses}) to the egress proxy at
   * `endpoint` (TCP) from here on: the host admits sandbox links to it, and this instance's existing routers are
   * re-applied with the redirect.
   * @returns ids of sandboxes whose router could not be re-applied (they get it at their next start)
   * @throws RuntimeError when the host rules cannot be set
   */
  async useEgressProxy(endpoint: EgressProxyEndpoint): Promise<string[]> {
    this.egressProxyEndpoint = { ...endpoint };
    await this.prepareHost();
    await run('nft', [
      ...['add', 'element', 'inet', HOST_TABLE, 'resolvers'],
      `{ ${endpoint.address} . tcp . ${endpoint.port} }`,
    ]);
    const failed: string[] = [];
    for (const sandboxId of await this.sandboxIds()) {
      const record = await this.readRecord(sandboxId);
      if (record === null || !(await exists(join(NETNS_DIR, this.netnsName(sandboxId, 'r'))))) continue;
      await this.apply(sandboxId, record.slot, record.policy, false).catch(() => failed.push(sandboxId));
    }
    return failed;
  }

  /** Stop admitting sandbox links to the egress proxy at `endpoint` (a server closing it). Idempotent. */
  async forgetEgressProxy(endpoint: EgressProxyEndpoint): Promise<void> {
    await run(
      'nft',
      [...['delete', 'element', 'inet', HOST_TABLE, 'resolvers'], `{ ${endpoint.address} . tcp . ${endpoint.port} }`],
      { ignore: /No such file|does not exist/ },
    );
  }

  /**
   * Redirect the sandbox's new TCP 80/443 connections to `addresses` to the egress proxy for `ttlSeconds` (the
   * resolver calls it for names bound to a secret the sandbox holds, before the answer leaves). No-op without a
   * proxy ({@link useEgressProxy}).
   * @throws RuntimeError when the sandbox has no network here or nftables refuses
   */
  async interceptAddresses(sandboxId: string, addresses: readonly string[], ttlSeconds: number): Promise<void> {
    const ipv4 = addresses.filter((address) => /^\d{1,3}(\.\d{1,3}){3}$/.test(address));
    if (ipv4.length === 0 || this.egressProxyEndpoint === undefined) return;
    const router = this.netnsName(sandboxId, 'r');
    if (!(await exists(join(NETNS_DIR, router))))
      throw new RuntimeError(`sandbox ${sandboxId} has no network on this host`);
    await inNetns(router, ['nft', '-f', '-'], interceptAddressesScript(ipv4, ttlSeconds));
  }

  /**
   * Stop admitting sandbox links to `endpoint` on the host (a server closing its resolver). Idempotent.
   * @throws RuntimeError when nftables refuses for a reason other than a missing element
   */
  async forgetResolver(endpoint: ResolverEndpoint): Promise<void> {
    await run(
      'nft',
      [...['delete', 'element', 'inet', HOST_TABLE, 'resolvers'], `{ ${endpoint.address} . udp . ${endpoint.port} }`],
      { ignore: /No such file|does not exist/ },
    );
  }

  /**
   * Stop admitting resolver endpoints that nothing listens on (a server killed before it could forget its own):
   * an admitted port without a listener would let sandboxes reach whatever host service binds it later.
   */
  private async pruneResolvers(): Promise<void> {
    const listed = await runCommand('nft', ['-j', 'list', 'set', 'inet', HOST_TABLE, 'resolvers'], {
      timeoutMs: 30_000,
    });
    if (listed.exitCode !== 0) return;
    const listening = {
      udp: udpListeners(await readFile('/proc/net/udp', 'utf8')),
      tcp: udpListeners(await readFile('/proc/net/tcp', 'utf8'), '0A'),
    };
    for (const endpoint of resolverElements(listed.stdout)) {
      const open = endpoint.protocol === 'tcp' ? listening.tcp : listening.udp;
      const bound = open.has(`${endpoint.address}:${endpoint.port}`) || open.has(`0.0.0.0:${endpoint.port}`);
      if (bound) continue;
      if (endpoint.protocol === 'tcp') await this.forgetEgressProxy(endpoint);
      else await this.forgetResolver(endpoint);
    }
  }

  /** The pool's host gateway address (its first usable address), held by the host's loopback. */
  hostGateway(): string {
    return numberToIpv4(this.poolBase + 1);
  }

  /** Path of the guest's namespace, which the OCI spec names and runsc create, start and restore run in. */
  guestNetnsPath(sandboxId: string): string {
    return join(NETNS_DIR, this.netnsName(sandboxId, 'g'));
  }

  /** Name of the sandbox's host-side link (15 characters). */
  hostLink(sandboxId: string): string {
    const digest = createHash('sha256').update(`${this.options.instanceHash}/${sandboxId}`).digest('hex');
    return `${HOST_LINK_PREFIX}${digest.slice(0, 13)}`;
  }

  /**
   * Prepare the host once per instance: IPv4 forwarding, the gateway's address, the host rules.
   * Called by {@link ensure}; a server calls it at start so the resolver can bind the gateway address.
   * @throws RuntimeError when a step fails (nftables missing, not root)
   */
  prepareHost(): Promise<void> {
    this.hostReady ??= this.setUpHost().catch((error: unknown) => {
      this.hostReady = undefined;
      throw error;
    });
    return this.hostReady;
  }

  private async setUpHost(): Promise<void> {
    await writeFile('/proc/sys/net/ipv4/ip_forward', '1\n');
    const gateway = this.hostGateway();
    await run('ip', ['addr', 'replace', `${gateway}/32`, 'dev', HOST_GATEWAY_LINK]);
    await run('nft', ['-f', '-'], { input: hostRules({ poolCidr: this.poolCidr, resolver: this.resolver }) });
    await run('nft', ['-f', '-'], { input: ingressHostRules() });
  }

  /**
   * Make the sandbox's network (idempotent: whatever exists is kept, whatever is missing is made), put the
   * guest's address back on its link (runsc moves it into its own stack, so it is re-added before every create
   * and restore), and apply `policy`.
   * @returns true when the namespaces were made by this call (a failed start then tears them down)
   * @throws RuntimeError when a step fails
   */
  async ensure(sandboxId: string, policy: NetworkPolicy): Promise<boolean> {
    await this.prepareHost();
    const guest = this.netnsName(sandboxId, 'g');
    const router = this.netnsName(sandboxId, 'r');
    const routerExists = await exists(join(NETNS_DIR, router));
    const guestExists = await exists(join(NETNS_DIR, guest));
    const made = !routerExists || !guestExists;
    const record = await this.readRecord(sandboxId);
    const slot = record?.slot ?? (await this.allocateSlot(sandboxId));
    const uplink = this.slotAddress(slot);
    const link = this.hostLink(sandboxId);
    if (made) {
      // Each step is a process (about 10 ms idle, 60–100 ms at load 13): fresh namespaces skip the cleanup of a
      // half-made network a crash left.
      const missing = [guestExists ? null : guest, routerExists ? null : router].filter((n) => n !== null);
      await run('ip', ['-b', '-'], { input: missing.map((name) => `netns add ${name}`).join('\n') });
      if (routerExists || guestExists || (await exists(`/sys/class/net/${link}`))) {
        await run('ip', ['link', 'del', link], { ignore: /Cannot find device/ });
        await run('ip', ['-n', router, 'link', 'del', ROUTER_GUEST_LINK], { ignore: /Cannot find device/ });
        await run('ip', ['-n', router, 'link', 'del', ROUTER_UPLINK], { ignore: /Cannot find device/ });
      }
      await inNetns(router, sysctls({ forward: true }));
      await inNetns(guest, sysctls({ forward: false }));
      await run('ip', ['-b', '-'], {
        input: [
          `link add ${link} type veth peer name ${ROUTER_UPLINK} netns ${router}`,
          `link set ${link} alias burrow:${this.options.instanceHash}:${sandboxId}`,
          `link set ${link} up`,
          `route replace ${uplink}/32 dev ${link} src ${this.hostGateway()}`,
        ].join('\n'),
      });
      await run('ip', ['-n', router, '-b', '-'], {
        input: [
          `link add ${ROUTER_GUEST_LINK} address ${GATEWAY_MAC} type veth peer name ${GUEST_LINK} address ${GUEST_MAC} netns ${guest}`,
          `addr add ${GUEST_GATEWAY}/${GUEST_PREFIX_LENGTH} dev ${ROUTER_GUEST_LINK}`,
          `addr add ${uplink}/32 dev ${ROUTER_UPLINK}`,
          'link set lo up',
          `link set ${ROUTER_GUEST_LINK} up`,
          `link set ${ROUTER_UPLINK} up`,
          `route add ${this.hostGateway()}/32 dev ${ROUTER_UPLINK}`,
          `route add default via ${this.hostGateway()} dev ${ROUTER_UPLINK}`,
        ].join('\n'),
      });
    }
    await run('ip', ['-n', guest, '-b', '-'], {
      input: [
        `addr replace ${GUEST_ADDRESS}/${GUEST_PREFIX_LENGTH} dev ${GUEST_LINK}`,
        'link set lo up',
        `link set ${GUEST_LINK} up`,
        `route replace default via ${GUEST_GATEWAY} dev ${GUEST_LINK}`,
      ].join('\n'),
    });
    await this.apply(sandboxId, slot, policy, made || record === null, made);
    return made;
  }

  /**
   * Replace the sandbox's policy in one nftables transaction (whole or not at all); new connections follow it at
   * once. Addresses the resolver handed out are kept.
   * @throws RuntimeError when the sandbox has no network here or nftables refuses the rules
   */
  async update(sandboxId: string, policy: NetworkPolicy): Promise<void> {
    const record = await this.readRecord(sandboxId);
    if (record === null || !(await exists(join(NETNS_DIR, this.netnsName(sandboxId, 'r'))))) {
      throw new RuntimeError(`sandbox ${sandboxId} has no network on this host`);
    }
    await this.apply(sandboxId, record.slot, policy, false);
  }

  private async apply(
    sandboxId: string,
    slot: number,
    policy: NetworkPolicy,
    declare: boolean,
    freshUplink = false,
  ): Promise<void> {
    const router = this.netnsName(sandboxId, 'r');
    const script = routerRules({
      policy,
      uplinkAddress: this.slotAddress(slot),
      resolver: this.resolver,
      never: this.never,
      declare,
      hostGateway: this.hostGateway(),
      intercept: this.egressProxyEndpoint === undefined ? undefined : interceptRules(this.egressProxyEndpoint),
    });
    await inNetns(router, ['nft', '-f', '-'], script);
    const mbps = policy.egressMbps ?? this.options.defaultEgressMbps;
    if (mbps === undefined) {
      // A fresh uplink has no token bucket to remove.
      if (freshUplink) return this.writeRecord(sandboxId, slot, policy);
      await run('tc', ['-n', router, 'qdisc', 'del', 'dev', ROUTER_UPLINK, 'root'], { ignore: /./ });
    } else {
      // A token bucket on the uplink's egress: about 10 ms of traffic as burst, at least 32 KiB.
      const burstBytes = Math.max(32 * 1024, Math.round((mbps * 1_000_000) / 8 / 100));
      await run('tc', [
        ...['-n', router, 'qdisc', 'replace', 'dev', ROUTER_UPLINK, 'root', 'tbf'],
        ...['rate', `${mbps}mbit`, 'burst', String(burstBytes), 'latency', '50ms'],
      ]);
    }
    await this.writeRecord(sandboxId, slot, policy);
  }

  private async writeRecord(sandboxId: string, slot: number, policy: NetworkPolicy): Promise<void> {
    await writeFile(join(this.options.sandboxDir(sandboxId), 'network.json'), JSON.stringify({ slot, policy }));
  }

  /**
   * Add addresses the resolver handed to a sandbox to its allowed set, each for `ttlSeconds` (a later call with
   * the same address restarts its timeout). The domain rules of a policy are enforced this way: a name the policy
   * allows resolves, and its addresses become reachable for the time the answer may be cached. IPv6 addresses are
   * ignored (IPv6 is refused). Called by the DNS resolver.
   * @param sandboxId the asking sandbox (see {@link sandboxForSourceAddress})
   * @param addresses IPv4 addresses from the answer
   * @param ttlSeconds how long they stay allowed, s (at least 1)
   * @throws RuntimeError when the sandbox has no network here or nftables refuses
   */
  async allowResolvedAddresses(sandboxId: string, addresses: readonly string[], ttlSeconds: number): Promise<void> {
    const ipv4 = addresses.filter((address) => /^\d{1,3}(\.\d{1,3}){3}$/.test(address));
    if (ipv4.length === 0) return;
    const ttl = Math.max(1, Math.ceil(ttlSeconds));
    const t = `inet ${ROUTER_TABLE}`;
    const list = ipv4.join(', ');
    // add (no-op when present), delete, add with the timeout: one transaction that also restarts a present timeout.
    const script = `add element ${t} resolved { ${list} }\ndelete element ${t} resolved { ${list} }\nadd element ${t} resolved { ${ipv4.map((a) => `${a} timeout ${ttl}s`).join(', ')} }\n`;
    const router = this.netnsName(sandboxId, 'r');
    if (!(await exists(join(NETNS_DIR, router))))
      throw new RuntimeError(`sandbox ${sandboxId} has no network on this host`);
    await inNetns(router, ['nft', '-f', '-'], script);
  }

  /**
   * The sandbox of this instance whose traffic arrives from `address` (its uplink address: what the resolver sees
   * as a query's source), with the policy last applied to it.
   * @returns undefined when no sandbox of this instance has that address
   */
  async sandboxForSourceAddress(address: string): Promise<SandboxNetworkIdentity | undefined> {
    if (!/^\d{1,3}(\.\d{1,3}){3}$/.test(address)) return undefined;
    const slot = ipv4ToNumber(address) - this.poolBase - 2;
    if (slot < 0 || slot >= this.poolSize - 3) return undefined;
    const owner = await readFile(join(this.slotDir, String(slot)), 'utf8').catch(() => '');
    const [hash, sandboxId] = owner.trim().split(' ');
    if (hash !== this.options.instanceHash || sandboxId === undefined) return undefined;
    const record = await this.readRecord(sandboxId);
    if (record === null || record.slot !== slot) return undefined;
    return { sandboxId, policy: record.policy };
  }

  /** The sandbox's uplink address (unique on the host), or null when it has no network here. */
  async uplinkAddress(sandboxId: string): Promise<string | null> {
    const record = await this.readRecord(sandboxId);
    return record === null ? null : this.slotAddress(record.slot);
  }

  /** Bytes through the sandbox's router, or null when it has none. */
  async usage(sandboxId: string): Promise<NetworkUsage | null> {
    const router = this.netnsName(sandboxId, 'r');
    if (!(await exists(join(NETNS_DIR, router)))) return null;
    const result = await runCommand('ip', [
      'netns',
      'exec',
      router,
      'nft',
      '-j',
      'list',
      'counters',
      'table',
      'inet',
      ROUTER_TABLE,
    ]);
    if (result.exitCode !== 0) return null;
    const bytes = (name: string): number => {
      const match = result.stdout.match(new RegExp(`"name": ?"${name}"[^}]*"bytes": ?(\\d+)`));
      return match?.[1] === undefined ? 0 : Number(match[1]);
    };
    return { egressBytes: bytes('egress'), ingressBytes: bytes('ingress') };
  }

  /**
   * Remove the sandbox's namespaces, links, rules (they live in its router's namespace) and address slot.
   * Idempotent.
   */
  async teardown(sandboxId: string): Promise<void> {
    await run('ip', ['link', 'del', this.hostLink(sandboxId)], { ignore: /Cannot find device/ });
    for (const suffix of ['r', 'g'] as const) {
      const name = this.netnsName(sandboxId, suffix);
      if (await exists(join(NETNS_DIR, name))) await run('ip', ['netns', 'del', name], { ignore: /No such file/ });
    }
    const record = await this.readRecord(sandboxId);
    if (record !== null) await this.releaseSlot(record.slot, sandboxId);
    for (const slot of await this.slotsOf(sandboxId)) await this.releaseSlot(slot, sandboxId);
    await rm(join(this.options.sandboxDir(sandboxId), 'network.json'), { force: true });
  }

  /** What of the sandbox's network is on the host, one line each (empty when nothing). */
  async remaining(sandboxId: string): Promise<string[]> {
    const left: string[] = [];
    for (const suffix of ['g', 'r'] as const) {
      const name = this.netnsName(sandboxId, suffix);
      if (await exists(join(NETNS_DIR, name))) left.push(`network namespace ${name}`);
    }
    if (await exists(`/sys/class/net/${this.hostLink(sandboxId)}`)) left.push(`link ${this.hostLink(sandboxId)}`);
    for (const slot of await this.slotsOf(sandboxId)) left.push(`address ${this.slotAddress(slot)}`);
    return left;
  }

  /** Ids of this instance's sandboxes that have a namespace or an address slot on the host. */
  async sandboxIds(): Promise<string[]> {
    const ids = new Set<string>();
    const prefix = `burrow-${this.options.instanceHash}-`;
    for (const name of await readdir(NETNS_DIR).catch(() => [] as string[])) {
      if (name.startsWith(prefix)) ids.add(name.slice(prefix.length, -2));
    }
    for (const [, owner] of await this.slotOwners()) {
      if (owner.hash === this.options.instanceHash) ids.add(owner.sandboxId);
    }
    return [...ids].sort();
  }

  private netnsName(sandboxId: string, suffix: 'g' | 'r'): string {
    return `burrow-${this.options.instanceHash}-${sandboxId}-${suffix}`;
  }

  private slotAddress(slot: number): string {
    return numberToIpv4(this.poolBase + 2 + slot);
  }

  private async readRecord(sandboxId: string): Promise<NetworkRecord | null> {
    const text = await readFile(join(this.options.sandboxDir(sandboxId), 'network.json'), 'utf8').catch(() => null);
    if (text === null) return null;
    try {
      return JSON.parse(text) as NetworkRecord;
    } catch {
      return null;
    }
  }

  /** Claim a free slot (an O_EXCL file), starting at one derived from the id so parallel claims rarely meet. */
  private async allocateSlot(sandboxId: string): Promise<number> {
    await mkdir(this.slotDir, { recursive: true });
    const slots = this.poolSize - 3;
    const start = Number.parseInt(createHash('sha256').update(sandboxId).digest('hex').slice(0, 8), 16) % slots;
    for (let i = 0; i < slots; i += 1) {
      const slot = (start + i) % slots;
      try {
        await writeFile(join(this.slotDir, String(slot)), `${this.options.instanceHash} ${sandboxId}\n`, {
          flag: 'wx',
        });
        await writeFile(
          join(this.options.sandboxDir(sandboxId), 'network.json'),
          JSON.stringify({ slot, policy: { mode: 'none', allowOut: [], denyOut: [] } }),
        );
        return slot;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
    }
    throw new RuntimeError(`no free address in the network pool ${this.poolCidr}`);
  }

  private async releaseSlot(slot: number, sandboxId: string): Promise<void> {
    const path = join(this.slotDir, String(slot));
    const owner = await readFile(path, 'utf8').catch(() => '');
    if (owner.trim() === `${this.options.instanceHash} ${sandboxId}`) await rm(path, { force: true });
  }

  private async slotsOf(sandboxId: string): Promise<number[]> {
    const slots: number[] = [];
    for (const [slot, owner] of await this.slotOwners()) {
      if (owner.hash === this.options.instanceHash && owner.sandboxId === sandboxId) slots.push(slot);
    }
    return slots;
  }

  private async slotOwners(): Promise<Array<[number, { hash: string; sandboxId: string }]>> {
    const owners: Array<[number, { hash: string; sandboxId: string }]> = [];
    for (const name of await readdir(this.slotDir).catch(() => [] as string[])) {
      const text = await readFile(join(this.slotDir, name), 'utf8').catch(() => '');
      const [hash, sandboxId] = text.trim().split(' ');
      if (hash !== undefined && sandboxId !== undefined) owners.push([Number(name), { hash, sandboxId }]);
    }
    return owners;
  }
}

function sysctls(options: { forward: boolean }): string[] {
  const writes = [
    'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6',
    'echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6',
    ...(options.forward ? ['echo 1 > /proc/sys/net/ipv4/ip_forward'] : []),
  ];
  return ['/bin/sh', '-c', writes.join(' && ')];
}

/**
 * The `address . udp . port` elements of the host's `resolvers` set, from `nft -j list set` output.
 * @returns the endpoints; nothing for output it cannot read
 */
export function resolverElements(nftJson: string): Array<ResolverEndpoint & { protocol: 'udp' | 'tcp' }> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(nftJson);
  } catch {
    return [];
  }
  const items = (parsed as { nftables?: Array<{ set?: { elem?: unknown[] } }> }).nftables ?? [];
  const endpoints: Array<ResolverEndpoint & { protocol: 'udp' | 'tcp' }> = [];
  for (const element of items.flatMap((item) => item.set?.elem ?? [])) {
    const concat = (element as { concat?: unknown[] }).concat;
    if (Array.isArray(concat) && typeof concat[0] === 'string' && typeof concat[2] === 'number') {
      endpoints.push({ address: concat[0], port: concat[2], protocol: concat[1] === 'tcp' ? 'tcp' : 'udp' });
    }
  }
  return endpoints;
}

/**
 * The IPv4 UDP sockets bound on this host's network namespace, as `a.b.c.d:port`, from `/proc/net/udp` (local
 * address in hex, host byte order on little-endian machines: `0100E70A:14E9` is 10.231.0.1:5353). With `state`
 * (hex, as `0A` for a TCP listener), only sockets in it: the same reads `/proc/net/tcp`.
 */
export function udpListeners(procNetUdp: string, state?: string): Set<string> {
  const bound = new Set<string>();
  for (const line of procNetUdp.split('\n').slice(1)) {
    const match = /^\s*\d+:\s+([0-9A-F]{8}):([0-9A-F]{4})\s+[0-9A-F]{8}:[0-9A-F]{4}\s+([0-9A-F]{2})\s/i.exec(line);
    if (match?.[1] === undefined || match[2] === undefined) continue;
    if (state !== undefined && match[3]?.toUpperCase() !== state) continue;
    const hex = match[1];
    const octets = [6, 4, 2, 0].map((i) => Number.parseInt(hex.slice(i, i + 2), 16));
    bound.add(`${octets.join('.')}:${Number.parseInt(match[2], 16)}`);
  }
  return bound;
}

async function inNetns(name: string, argv: string[], input?: string): Promise<void> {
  await run('nsenter', [`--net=${join(NETNS_DIR, name)}`, ...argv], input === undefined ? {} : { input });
}

async function run(file: string, args: string[], options: { input?: string; ignore?: RegExp } = {}): Promise<void> {
  const result = await runCommand(file, args, { input: options.input, timeoutMs: 30_000 });
  if (result.exitCode === 0) return;
  if (options.ignore?.test(result.stderr)) return;
  throw new RuntimeError(
    `network step failed: ${file} ${args.join(' ')} (exit ${result.exitCode ?? result.signal})`,
    result.stderr.trim(),
  );
}

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}
