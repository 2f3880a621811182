import type { AuditRecord, ListAuditOptions, UsageOptions, UsageTotals } from '@burrow/sdk';
import type { Command } from 'commander';
import { type CliContext, connectionFor, formatTable, type GlobalOptions, loadSdk } from '../cli-context.js';
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

const round = (n: number) => String(Math.round(n * 1000) / 1000);

/** Rows of a usage report's table: one per group, then the total. */
export function usageRows(groups: ReadonlyArray<UsageTotals & { key: string }>, total: UsageTotals): string[][] {
  const row = (key: string, t: UsageTotals) => [
    key,
    round(t.runningSeconds),
    round(t.vcpuSeconds),
    round(t.memoryGiBSeconds),
    round(t.pausedSeconds),
    round(t.stoppedSeconds),
    round(t.diskGiBSeconds),
    round(t.snapshotGiBSeconds),
  ];
  return [...groups.map((g) => row(g.key === '' ? '(none)' : g.key, g)), row('TOTAL', total)];
}

/** Registers `burrow audit [--follow]`, `burrow audit export`, `burrow audit verify` and `burrow usage`. */
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

  program
    .command('usage')
    .description('usage from the event log: running × vCPU and memory, paused/stopped × disk, snapshot GiB-seconds')
    .option('--from <instant>', 'window start, ISO-8601 (default: 24 hours before --to)')
    .option('--to <instant>', 'window end, ISO-8601 (default: now)')
    .option('--group-by <grouping>', 'sandbox, day or label:KEY (default: sandbox)')
    .option('--tenant <tenant>', "another tenant's usage (admin key)")
    .option('--json', 'print the report as JSON')
    .action(async (_options: unknown, command: Command) => {
      const flags = command.optsWithGlobals<
        GlobalOptions & { from?: string; to?: string; groupBy?: string; tenant?: string; json?: boolean }
      >();
      const { BurrowClient } = await loadSdk();
      const report = await new BurrowClient(connectionFor(context, flags)).usage.get({
        from: flags.from,
        to: flags.to,
        groupBy: flags.groupBy as UsageOptions['groupBy'],
        tenant: flags.tenant,
      });
      if (flags.json === true) {
        context.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
        return;
      }
      context.stderr.write(`usage of tenant ${report.tenantId} from ${report.from} to ${report.to}\n`);
      context.stdout.write(
        formatTable(
          [
            report.groupBy.toUpperCase(),
            'RUNNING_S',
            'VCPU_S',
            'MEM_GIB_S',
            'PAUSED_S',
            'STOPPED_S',
            'DISK_GIB_S',
            'SNAP_GIB_S',
          ],
          usageRows(report.groups, report.total),
        ),
      );
    });
}
