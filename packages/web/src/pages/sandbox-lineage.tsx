import type { Sandbox, Snapshot } from '@burrow/contract';
import { useState } from 'preact/hooks';
import { ApiError, api } from '../api.js';
import { ErrorBox, StateBadge } from '../components/ui.js';
import { formatBytes, formatTime, useLoad } from '../util.js';
import { listAllSandboxes } from './sandboxes.js';

interface Lineage {
  sandboxes: Sandbox[];
  snapshots: Snapshot[];
}

/** The root of `id`'s family among `byId`: its oldest ancestor still listed. */
function rootOf(id: string, byId: Map<string, Sandbox>): string {
  let current = id;
  const seen = new Set<string>();
  for (;;) {
    const parentId = byId.get(current)?.lineage.parentId;
    if (parentId === null || parentId === undefined || !byId.has(parentId) || seen.has(parentId)) return current;
    seen.add(current);
    current = parentId;
  }
}

/** Snapshots and lineage: the fork tree of this sandbox's family with each member's snapshots, and actions. */
export function LineagePanel({ sandbox, onChanged }: { sandbox: Sandbox; onChanged: () => void }) {
  const data = useLoad(
    async (signal): Promise<Lineage> => ({
      sandboxes: await listAllSandboxes('', [], signal),
      snapshots: (await api<{ items: Snapshot[] }>('/snapshots', { signal })).items,
    }),
    [sandbox.id],
    5000,
  );
  const [count, setCount] = useState('1');
  const [error, setError] = useState<ApiError | undefined>(undefined);
  const [busy, setBusy] = useState('');
  const act = (label: string, call: () => Promise<unknown>) => {
    setBusy(label);
    setError(undefined);
    call()
      .catch((caught: unknown) => caught instanceof ApiError && setError(caught))
      .finally(() => {
        setBusy('');
        data.reload();
        onChanged();
      });
  };
  const byId = new Map((data.data?.sandboxes ?? []).map((s) => [s.id, s]));
  byId.set(sandbox.id, byId.get(sandbox.id) ?? sandbox);
  const children = new Map<string, Sandbox[]>();
  for (const s of byId.values()) {
    const parentId = s.lineage.parentId;
    if (parentId !== null && byId.has(parentId)) children.set(parentId, [...(children.get(parentId) ?? []), s]);
  }
  const snapshotsOf = new Map<string, Snapshot[]>();
  for (const snap of data.data?.snapshots ?? [])
    snapshotsOf.set(snap.sandboxId, [...(snapshotsOf.get(snap.sandboxId) ?? []), snap]);
  const root = rootOf(sandbox.id, byId);

  const renderNode = (s: Sandbox) => (
    <li key={s.id} aria-current={s.id === sandbox.id ? 'true' : undefined} data-testid="lineage-node">
      <span class={s.id === sandbox.id ? 'node current' : 'node'}>
        <a href={`#/sandboxes/${s.id}/snapshots`}>
          <code>{s.id}</code>
        </a>{' '}
        <StateBadge state={s.state} />
      </span>
      {(snapshotsOf.get(s.id)?.length ?? 0) + (children.get(s.id)?.length ?? 0) === 0 ? null : (
        <ul>
          {(snapshotsOf.get(s.id) ?? []).map((snap) => (
            <li key={snap.id} data-testid="snapshot-node">
              <span class="node snapshot">
                ◆ <code>{snap.name ?? snap.id}</code>{' '}
                <span class="muted small">
                  {formatTime(snap.createdAt)} · {formatBytes(snap.imageSizeBytes + snap.diskSizeBytes)}
                  {snap.memory ? ' · memory' : ''}
                </span>{' '}
                <button
                  type="button"
                  disabled={busy !== ''}
                  onClick={() =>
                    act('restore', async () => {
                      const created = await api<Sandbox>('/sandboxes', {
                        method: 'POST',
                        json: { fromSnapshot: snap.id },
                      });
                      location.hash = `#/sandboxes/${created.id}/snapshots`;
                    })
                  }
                >
                  Restore as new sandbox
                </button>{' '}
                <button
                  type="button"
                  class="danger"
                  disabled={busy !== ''}
                  onClick={() => act('delete', () => api(`/snapshots/${snap.id}`, { method: 'DELETE' }))}
                >
                  Delete
                </button>
              </span>
            </li>
          ))}
          {(children.get(s.id) ?? []).map(renderNode)}
        </ul>
      )}
    </li>
  );

  const rootSandbox = byId.get(root);
  return (
    <div>
      <div class="toolbar">
        <button
          type="button"
          disabled={busy !== ''}
          onClick={() =>
            act('snapshot', () => api(`/sandboxes/${sandbox.id}/snapshots`, { method: 'POST', json: { memory: true } }))
          }
        >
          {busy === 'snapshot' ? 'Snapshotting…' : 'Snapshot'}
        </button>
        <label>
          Fork{' '}
          <input
            type="number"
            min={1}
            max={20}
            value={count}
            size={3}
            aria-label="number of forks"
            onInput={(e) => setCount(e.currentTarget.value)}
          />
        </label>
        <button
          type="button"
          disabled={busy !== ''}
          onClick={() =>
            act('fork', () => api(`/sandboxes/${sandbox.id}/fork`, { method: 'POST', json: { count: Number(count) } }))
          }
        >
          {busy === 'fork' ? 'Forking…' : 'Fork'}
        </button>
      </div>
      <ErrorBox error={error ?? data.error} />
      <ul aria-label="fork and snapshot tree" class="tree">
        {rootSandbox === undefined ? null : renderNode(rootSandbox)}
      </ul>
    </div>
  );
}
