import type { AuditRecord, ListAuditOptions } from '@burrow/sdk';
import type { Command } from 'commander';
import { type CliContext, connectionFor, type GlobalOptions, loadSdk } from '../cli-context.js';
import { ExitCode, UsageError } from '../exit-codes.js';
import { parsePositiveInt } from '../key-value-parse.js';

interface AuditFlags {
  from?: string;
  to?: string;
  tenant?: string;
  key?: string;
  target?: string;
  result?: string;
  action?: string;
  after?: string;
  limit?: string;
  follow?: boolean;
  json?: boolean;
}

const RESULTS = ['ok', 'refused', 'failed'] as const;

/** The filter flags of `burrow audit` and `burrow audit export`, as SDK options. */
export function auditFilter(flags: AuditFlags): ListAuditOptions {
  let result: ListAuditOptions['result'];
  if (flags.result !== undefined) {
    result = RESULTS.find((r) => r === flags.result);
    if (result === undefined) throw new UsageError(`unknown result "${flags.result}"`, 'use ok, refused or failed');
  }
  return {
    from: flags.from,
    to: flags.to,
    tenant: flags.tenant,
    keyId: flags.key,
    target: flags.target,
    result,
    action: flags.action,
    cursor: flags.after,
  };
}

/** One record as a line: time, result, status, action, target, key, address, error code. */
export function auditLine(r: AuditRecord): string {
  const who = r.keyId === null ? 'no key' : `${r.keyId}${r.keyName === null ? '' : ` (${r.keyName})`}`;
  return (
    `${r.id}\t${r.at}\t${r.result}\t${r.status}\t${r.action}\t${r.target ?? '-'}\t${r.tenantId ?? '-'}\t${who}\t` +
    `${r.sourceAddress}\t${r.errorCode ?? '-'}\n`
  );
}

function addFilterOptions(command: Command): Command {
  return command
    .option('--from <instant>', 'records at or after this ISO-8601 instant')
    .option('--to <instant>', 'records before this ISO-8601 instant')
    .option('--tenant <tenant>', "another tenant's records (admin key)")
    .option('--key <keyId>', 'records of this key')
    .option('--target <id>', 'records naming this sandbox, key, snapshot, template or tenant')
    .option('--result <result>', 'ok, refused or failed')
    .option('--action <prefix>', 'action prefix: DELETE, "POST /v1/sandboxes"')
    .option('--after <id>', 'records after this id');
}

/** Registers `burrow audit [--follow]`, `burrow audit export` and `burrow audit verify`. */
export function registerGovernanceCommands(program: Command, context: CliContext & { exitCode: number }): void {
  const audit = addFilterOptions(
    program
      .command('audit')
      .description('the audit log: every request that changed something or was refused')
      .option('--limit <n>', 'records to show without --follow, 1-1000 (default: 100)')
      .option('-f, --follow', 'keep printing new records as they are written (Ctrl-C to stop)')
      .option('--json', 'print records as JSON lines'),
  ).action(async (_options: unknown, command: Command) => {
    const flags = command.optsWithGlobals<GlobalOptions & AuditFlags>();
    const filter = auditFilter(flags);
    const { BurrowClient } = await loadSdk();
    const client = new BurrowClient(connectionFor(context, flags));
    const print = (r: AuditRecord) =>
      context.stdout.write(flags.json === true ? `${JSON.stringify(r)}\n` : auditLine(r));
    if (flags.follow === true) {
      const controller = new AbortController();
      const stop = () => controller.abort();
      process.once('SIGINT', stop);
      try {
        for await (const r of client.audit.follow({ ...filter, signal: controller.signal })) print(r);
      } finally {
        process.off('SIGINT', stop);
      }
      return;
    }
    const limit = flags.limit === undefined ? undefined : parsePositiveInt(flags.limit, '--limit');
    const page = await client.audit.list({ ...filter, limit });
    for (const r of page.items) print(r);
    if (page.items.length === (limit ?? 100) && flags.json !== true) {
      context.stderr.write(`more: burrow audit --after ${page.nextCursor}\n`);
    }
  });

  addFilterOptions(
    audit.command('export').description('every matching record as JSON lines (one object per line), oldest first'),
  ).action(async (_options: unknown, command: Command) => {
    const flags = command.optsWithGlobals<GlobalOptions & AuditFlags>();
    const filter = auditFilter(flags);
    const { BurrowClient } = await loadSdk();
    const client = new BurrowClient(connectionFor(context, flags));
    let cursor = filter.cursor;
    for (;;) {
      const page = await client.audit.list({ ...filter, cursor, limit: 1000 });
      for (const r of page.items) context.stdout.write(`${JSON.stringify(r)}\n`);
      if (page.items.length < 1000 || page.nextCursor === null) break;
      cursor = page.nextCursor;
    }
  });

  audit
    .command('verify')
    .description('check the hash chain; names every removed or edited record (admin key); exits 1 when broken')
    .option('--json', 'print the result as JSON')
    .action(async (_options: unknown, command: Command) => {
      const flags = command.optsWithGlobals<GlobalOptions & { json?: boolean }>();
      const { BurrowClient } = await loadSdk();
      const result = await new BurrowClient(connectionFor(context, flags)).audit.verify();
      if (flags.json === true) context.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
      else if (result.ok) {
        const anchor =
          result.prunedThrough === null ? '' : ` (records through ${result.prunedThrough} removed by retention)`;
        context.stdout.write(`ok: ${result.checked} records chain correctly${anchor}\n`);
      } else {
        for (const p of result.problems) context.stdout.write(`${p.kind} ${p.id}: ${p.message}\n`);
      }
      if (!result.ok) context.exitCode = ExitCode.failure;
    });
}
