import type { NetworkPolicyRequest, SandboxInfo } from '@burrow/sdk';
import type { Command } from 'commander';
import { type CliContext, connectionFor, type GlobalOptions, loadSdk, printJson } from '../cli-context.js';
import { UsageError } from '../exit-codes.js';
import { collect, parsePositiveInt } from '../key-value-parse.js';

/** The network flags of `burrow sandbox create` and `burrow network set`. */
export interface NetworkFlags {
  network?: string;
  allowOut?: string[];
  denyOut?: string[];
  egressMbps?: string;
}

/** Adds `--network`, `--allow-out`, `--deny-out`, `--egress-mbps` to `command`. */
export function networkOptions(command: Command): Command {
  return command
    .option('--network <mode>', 'egress (connections out under the rules) or none (no network)')
    .option(
      '--allow-out <cidr|domain>',
      'destination always allowed, e.g. 203.0.113.0/24, pypi.org (repeatable)',
      collect,
    )
    .option('--deny-out <cidr|domain>', 'destination denied, e.g. 0.0.0.0/0 (repeatable; --allow-out wins)', collect)
    .option('--egress-mbps <n>', 'egress bandwidth limit, Mbit/s');
}

/**
 * The network policy the flags ask for, or undefined when none is given.
 * @throws UsageError for an unknown mode or a malformed number
 */
export function networkRequest(flags: NetworkFlags): NetworkPolicyRequest | undefined {
  const given =
    flags.network !== undefined ||
    flags.allowOut !== undefined ||
    flags.denyOut !== undefined ||
    flags.egressMbps !== undefined;
  if (!given) return undefined;
  const request: NetworkPolicyRequest = {};
  if (flags.network !== undefined) {
    if (flags.network !== 'egress' && flags.network !== 'none') {
      throw new UsageError(`unknown network mode "${flags.network}"`, 'use --network egress or --network none');
    }
    request.mode = flags.network;
  }
  if (flags.allowOut !== undefined) request.allowOut = flags.allowOut;
  if (flags.denyOut !== undefined) request.denyOut = flags.denyOut;
  if (flags.egressMbps !== undefined) request.egressMbps = parsePositiveInt(flags.egressMbps, '--egress-mbps');
  return request;
}

/** One line describing a sandbox's network for `burrow sandbox info`. */
export function describeNetwork(info: SandboxInfo): string {
  const network = info.network;
  if (network === undefined) return 'unknown';
  if (network.mode === 'none') return 'none';
  const parts = ['egress'];
  if (network.allowOut.length > 0) parts.push(`allow ${network.allowOut.join(', ')}`);
  if (network.denyOut.length > 0) parts.push(`deny ${network.denyOut.join(', ')}`);
  if (network.egressMbps !== null) parts.push(`${network.egressMbps} Mbit/s`);
  if (network.usage !== undefined) {
    parts.push(`${network.usage.egressBytes} B out, ${network.usage.ingressBytes} B in`);
  }
  return parts.join('; ');
}

/** Registers `burrow network set`. */
export function registerNetworkCommands(program: Command, context: CliContext): void {
  const network = program.command('network').description("change a sandbox's network policy");
  networkOptions(
    network
      .command('set')
      .description('replace the network policy of a sandbox (whole: rules left out are removed; mode left out stays)')
      .argument('<id>', 'sandbox id'),
  )
    .option('--json', 'print the sandbox as JSON')
    .action(async (id: string, _options: unknown, command: Command) => {
      const { Sandbox } = await loadSdk();
      const options = command.optsWithGlobals<GlobalOptions & NetworkFlags & { json?: boolean }>();
      const request = networkRequest(options);
      if (request === undefined) {
        throw new UsageError('no network policy given', 'pass --network, --allow-out, --deny-out or --egress-mbps');
      }
      const found = await Sandbox.get(id, connectionFor(context, options));
      await found.network.update(request);
      if (options.json === true) printJson(context, found.info);
      else context.stdout.write(`${describeNetwork(found.info)}\n`);
    });
}
