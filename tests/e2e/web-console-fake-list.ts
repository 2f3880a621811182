/**
 * A FAKE `GET /v1/sandboxes` answer of `count` sandboxes for the console's 500-row table measurement (real sandboxes
 * by the hundred do not fit on a test machine). Every `generation` moves a tenth of them to another state, so each
 * poll changes rows as a busy tenant's table would.
 */
export function fakeSandboxList(count: number, generation: number): { items: unknown[]; nextCursor: null } {
  const now = Date.now();
  const items = Array.from({ length: count }, (_, i) => {
    const paused = (i + generation) % 10 === 0;
    const at = new Date(now + 60_000 + i * 1000).toISOString();
    return {
      id: `sbx_fake${String(i).padStart(16, '0')}`,
      template: 'base',
      templateId: 'fake',
      state: paused ? 'paused' : 'running',
      conditions: [],
      env: {},
      cwd: '/root',
      hostname: `fake-${i}`,
      resources: { cpuCount: 1, memoryMiB: 512, diskMiB: 2048 },
      labels: { team: `t${i % 7}`, gen: String(generation) },
      timeoutMs: 300_000,
      timeoutAction: 'pause',
      idleTimeoutMs: null,
      maxAgeMs: null,
      pausedRetentionMs: null,
      snapshotKeepLast: null,
      expiresAt: at,
      expiry: { at, action: 'pause', reason: 'timeout' },
      idleDeadlineAt: null,
      timeoutAt: at,
      desiredState: paused ? 'paused' : 'running',
      autoResume: true,
      keeps: { filesystem: true, memory: true },
      lineage: { parentId: null, snapshotId: null },
      createdAt: new Date(now - i * 1000).toISOString(),
      updatedAt: new Date(now).toISOString(),
    };
  });
  return { items, nextCursor: null };
}
