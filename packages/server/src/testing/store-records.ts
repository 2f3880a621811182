import type { SandboxRecord } from '../store/sandbox-store.js';

/** The instant store test records are made at unless they say otherwise (ISO 8601). */
export const TEST_RECORD_AT = '2026-11-29T08:00:00.000Z';

/**
 * A sandbox row for store tests: tenant `t1`, template `base`, running, 1 CPU, 256 MiB, 100 MiB disk, no TTL,
 * created at {@link TEST_RECORD_AT}; `fields` replace any of these.
 */
export function testSandboxRecord(id: string, fields: Partial<SandboxRecord> = {}): SandboxRecord {
  const createdAt = fields.createdAt ?? TEST_RECORD_AT;
  return {
    id,
    tenantId: 't1',
    template: 'base',
    templateId: 'tid',
    state: 'running',
    conditions: [],
    env: {},
    labels: {},
    cwd: '/root',
    hostname: id,
    cpuCount: 1,
    memoryMiB: 256,
    diskMiB: 100,
    timeoutMs: null,
    expiresAt: null,
    createdAt,
    updatedAt: createdAt,
    version: 1,
    desiredState: 'running',
    autoResume: true,
    parentId: null,
    snapshotId: null,
    ...fields,
  };
}
