/**
 * Writes `packages/contract/src/generated/wire-parsers.ts`: the schemas clients parse responses and stream frames with,
 * compiled to plain functions by zod's own compiler, so that a client checks a response without loading zod.
 *
 * `tsx packages/contract/scripts/generate-wire-parsers.ts [--check]` (`npm run wire-parsers -w @burrow/contract`);
 * `src/wire-parsers.test.ts` fails when the committed file differs from what this generates.
 *
 * zod's compiler hands a generated function its constants (regexes, sets of allowed values, a few helpers) through
 * `new Function(...names, body)`. This script captures them there and writes each as source; a constant it cannot
 * write (a user callback, a schema run at runtime) stops the generation with the schema's name.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { z } from 'zod';
import { compileFn, isValidBase64, util } from 'zod/v4/core';
import * as contract from '../src/index.js';

/** The schemas the SDK parses wire data with: every response body and stream frame. */
export const WIRE_SCHEMAS = [
  'ApiKeyListSchema',
  'AuditListSchema',
  'AuditVerifySchema',
  'ArchiveUploadResultSchema',
  'BatchWriteResponseSchema',
  'BucketListSchema',
  'BucketSchema',
  'CommandInfoSchema',
  'CommandListSchema',
  'CommandServerFrameSchema',
  'ConsoleLoginLinkSchema',
  'CreatedApiKeySchema',
  'CreatedWebhookSchema',
  'ErrorEnvelopeSchema',
  'ExecAnswerSchema',
  'EventListSchema',
  'EventSchema',
  'ExecResultSchema',
  'ExecServerFrameSchema',
  'ExistsResponseSchema',
  'FileInfoSchema',
  'FileListSchema',
  'FileWatchEventSchema',
  'ForkSandboxResponseSchema',
  'HealthSchema',
  'PortListSchema',
  'PortUrlSchema',
  'QuotaSchema',
  'SandboxInspectionSchema',
  'SandboxListSchema',
  'SandboxSchema',
  'SecretListSchema',
  'SecretSchema',
  'SnapshotListSchema',
  'SnapshotSchema',
  'SyncResultSchema',
  'TemplateBuildEventSchema',
  'TemplateListSchema',
  'TemplateSchema',
  'TenantDefaultsSchema',
  'UsageReportSchema',
  'VolumeListSchema',
  'VolumeSchema',
  'WebhookListSchema',
] as const satisfies readonly (keyof typeof contract)[];

/** The contract's exports by name. */
const SCHEMAS: Record<string, unknown> = contract;

const OUT = fileURLToPath(new URL('../src/generated/wire-parsers.ts', import.meta.url));

/** Helpers generated code calls, written once at the top of the file from zod's own source. */
const HELPERS = new Map<unknown, { name: string; source: string }>([
  [util.isPlainObject, { name: 'isPlainObject', source: `${util.isObject}\n${util.isPlainObject}` }],
  [isValidBase64, { name: 'isValidBase64', source: `${isValidBase64}` }],
  [util.shallowClone, { name: 'shallowClone', source: `${util.shallowClone}` }],
  [Object.prototype.propertyIsEnumerable, { name: 'propertyIsEnumerable', source: '' }],
]);

interface Captured {
  names: string[];
  body: string;
  values: unknown[];
}

/** Compiles one schema, capturing the body and constants zod's compiler passes to `new Function`. */
function compileCaptured(schema: z.ZodType): { captured: Captured; definite: boolean } {
  const RealFunction = globalThis.Function;
  let captured: Captured | undefined;
  function CapturingFunction(...args: string[]) {
    const factory = RealFunction(...args) as (...values: unknown[]) => unknown;
    return (...values: unknown[]) => {
      captured = { names: args.slice(0, -1), body: args.at(-1) ?? '', values };
      return factory(...values);
    };
  }
  globalThis.Function = CapturingFunction as unknown as FunctionConstructor;
  let definite: boolean;
  try {
    definite = compileFn(schema).definite ?? false;
  } finally {
    globalThis.Function = RealFunction;
  }
  if (captured === undefined) throw new Error('zod compiled the schema without new Function');
  return { captured, definite };
}

function constantSource(value: unknown, schemaName: string, used: Set<string>): string {
  if (value instanceof RegExp) return `new RegExp(${JSON.stringify(value.source)}, ${JSON.stringify(value.flags)})`;
  if (value instanceof Set) {
    const items = [...value].map((item) => {
      if (item === undefined) return 'undefined';
      if (item === null || ['string', 'number', 'boolean'].includes(typeof item)) return JSON.stringify(item);
      throw new Error(`${schemaName}: a set holds a ${typeof item}, which this script cannot write`);
    });
    return `new Set([${items.join(', ')}])`;
  }
  if (typeof value === 'function' && value.length === 0 && !HELPERS.has(value)) {
    // A default's getter (`() => def.defaultValue`): written as a getter of the same JSON value, fresh per call.
    const constant: unknown = value();
    const json = JSON.stringify(constant);
    if (json !== undefined && JSON.stringify(JSON.parse(json)) === json) return `() => (${json})`;
  }
  const helper = HELPERS.get(value);
  if (helper !== undefined) {
    if (helper.source === '') return `Object.prototype.${helper.name}`;
    used.add(helper.name);
    return helper.name;
  }
  throw new Error(`${schemaName}: zod's compiler needs a constant this script cannot write (${String(value)})`);
}

function parserName(schemaName: string): string {
  return `${schemaName.replace(/Schema$/, '')}Parser`;
}

/** The text of `src/generated/wire-parsers.ts`. */
export function renderWireParsers(): string {
  const used = new Set<string>();
  const parsers: string[] = [];
  for (const schemaName of WIRE_SCHEMAS) {
    const { captured, definite } = compileCaptured(SCHEMAS[schemaName] as z.ZodType);
    if (!definite) throw new Error(`${schemaName}: zod's compiled parser may reject input the schema accepts`);
    const [invalidName, ...names] = captured.names;
    const [invalidValue, ...values] = captured.values;
    if (invalidName !== 'INVALID' || typeof invalidValue !== 'symbol') {
      throw new Error(`${schemaName}: zod's compiler no longer passes INVALID first`);
    }
    const constants = names.map((name, i) => `  const ${name} = ${constantSource(values[i], schemaName, used)};\n`);
    parsers.push(
      `/** Parses like \`${schemaName}.safeParse\`: the value, or INVALID. */\n` +
        `export const ${parserName(schemaName)}: WireParser<z.output<typeof contract.${schemaName}>> = {\n` +
        `  schemaName: '${schemaName}',\n` +
        `  parse: lazyParser(() => {\n${constants.join('')}` +
        `  ${captured.body.replaceAll('\n', '\n  ')};\n` +
        '  }),\n};\n',
    );
  }
  const helpers = [...HELPERS.values()].filter((h) => used.has(h.name)).map((h) => h.source);
  return [
    "// Generated by packages/contract/scripts/generate-wire-parsers.ts from the zod schemas with zod's compiler;",
    '// do not edit (`npm run wire-parsers -w @burrow/contract` writes it again).',
    '// @ts-nocheck',
    "import type { z } from 'zod';",
    "import type * as contract from '../index.js';",
    "import { INVALID, lazyParser, type WireParser } from '../wire-parser.js';",
    '',
    ...helpers,
    '',
    parsers.join('\n'),
  ].join('\n');
}

async function main(argv: string[]): Promise<number> {
  const text = renderWireParsers();
  if (argv.includes('--check')) {
    const committed = await readFile(OUT, 'utf8').catch(() => '');
    if (committed === text) return 0;
    process.stderr.write(`${OUT} is stale: run npm run wire-parsers -w @burrow/contract and commit it\n`);
    return 1;
  }
  await writeFile(OUT, text);
  return 0;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) process.exitCode = await main(process.argv.slice(2));
