import type { Sandbox } from '@burrow/contract';
import { EVENT_TYPES } from '@burrow/contract/event-types';
import { useState } from 'preact/hooks';
import { ApiError, api } from '../api.js';
import { Countdown, deadlineOf, ErrorBox, StateBadge } from '../components/ui.js';
import { formatSpan, formatTime, useEventStream, useLoad, useNow } from '../util.js';
import { FilesPanel } from './sandbox-files.js';
import { LineagePanel } from './sandbox-lineage.js';
import { CommandsPanel, EventsPanel, MetricsPanel } from './sandbox-panels.js';
import { TerminalPanel } from './sandbox-terminal.js';

const TABS = [
  ['overview', 'Overview'],
  ['terminal', 'Terminal'],
  ['files', 'Files'],
  ['commands', 'Commands'],
  ['events', 'Events'],
  ['metrics', 'Metrics'],
  ['snapshots', 'Snapshots & lineage'],
] as const;

/** One sandbox: its header (state, deadline, actions) and a tab per capability. */
export function SandboxPage({ id, tab }: { id: string; tab: string }) {
  const sandbox = useLoad(() => api<Sandbox>(`/sandboxes/${id}`), [id], 5000);
  useEventStream(() => sandbox.reload(), EVENT_TYPES, id);
  const now = useNow(1000);
  const [actionError, setActionError] = useState<ApiError | undefined>(undefined);
  const [busy, setBusy] = useState('');
  const s = sandbox.data;
  const deadline = s === undefined ? null : deadlineOf(s);
  const act = async (label: string, call: () => Promise<unknown>) => {
    setBusy(label);
    setActionError(undefined);
    try {
      await call();
    } catch (caught) {
      if (caught instanceof ApiError) setActionError(caught);
    } finally {
      setBusy('');
      sandbox.reload();
    }
  };
  return (
    <section aria-labelledby="sandbox-title">
      <p class="crumbs">
        <a href="#/sandboxes">Sandboxes</a> /
      </p>
      <div class="title-row">
        <h1 id="sandbox-title">
          <code>{id}</code>
        </h1>
        {s === undefined ? null : <StateBadge state={s.state} />}
        {deadline === null ? null : (
          <Countdown at={deadline.at} now={now} ticking={deadline.ticking} label={deadline.label} />
        )}
        <span class="spacer" />
        {s?.state === 'running' ? (
          <button
            type="button"
            disabled={busy !== ''}
            onClick={() => act('pause', () => api(`/sandboxes/${id}/pause`, { method: 'POST' }))}
          >
            {busy === 'pause' ? 'Pausing…' : 'Pause'}
          </button>
        ) : null}
        {s?.state === 'paused' || s?.state === 'stopped' ? (
          <button
            type="button"
            disabled={busy !== ''}
            onClick={() =>
              act('resume', () =>
                api(`/sandboxes/${id}/${s.state === 'paused' ? 'resume' : 'start'}`, { method: 'POST' }),
              )
            }
          >
            {busy === 'resume' ? 'Resuming…' : 'Resume'}
          </button>
        ) : null}
        <DeleteButton id={id} onError={setActionError} />
      </div>
      <ErrorBox error={actionError ?? sandbox.error} />
      <nav class="tabs" aria-label="Sandbox sections">
        {TABS.map(([key, label]) => (
          <a key={key} href={`#/sandboxes/${id}/${key}`} aria-current={tab === key ? 'page' : undefined}>
            {label}
          </a>
        ))}
      </nav>
      {s === undefined ? (
        <p>Loading…</p>
      ) : tab === 'terminal' ? (
        <TerminalPanel sandbox={s} />
      ) : tab === 'files' ? (
        <FilesPanel sandbox={s} />
      ) : tab === 'commands' ? (
        <CommandsPanel sandbox={s} />
      ) : tab === 'events' ? (
        <EventsPanel sandbox={s} />
      ) : tab === 'metrics' ? (
        <MetricsPanel sandbox={s} />
      ) : tab === 'snapshots' ? (
        <LineagePanel sandbox={s} onChanged={sandbox.reload} />
      ) : (
        <Overview sandbox={s} onChanged={sandbox.reload} />
      )}
    </section>
  );
}

function DeleteButton({ id, onError }: { id: string; onError: (error: ApiError) => void }) {
  const [asking, setAsking] = useState(false);
  if (!asking) {
    return (
      <button type="button" class="danger" onClick={() => setAsking(true)}>
        Delete
      </button>
    );
  }
  return (
    <span class="confirm-inline">
      Delete for good?{' '}
      <button
        type="button"
        class="danger"
        onClick={() =>
          api(`/sandboxes/${id}`, { method: 'DELETE' })
            .then(() => {
              location.hash = '#/sandboxes';
            })
            .catch((caught: unknown) => caught instanceof ApiError && onError(caught))
        }
      >
        Yes, delete
      </button>
      <button type="button" onClick={() => setAsking(false)}>
        No
      </button>
    </span>
  );
}

function Overview({ sandbox: s, onChanged }: { sandbox: Sandbox; onChanged: () => void }) {
  const rows: [string, string][] = [
    ['Template', s.template],
    ['Desired state', s.desiredState],
    ['CPU', `${s.resources.cpuCount}`],
    ['Memory', `${s.resources.memoryMiB} MiB`],
    ['Disk', `${s.resources.diskMiB} MiB`],
    ['Hostname', s.hostname],
    ['Working directory', s.cwd],
    ['Created', formatTime(s.createdAt)],
    ['Keeps', `filesystem ${s.keeps.filesystem ? 'yes' : 'no'}, memory ${s.keeps.memory ? 'yes' : 'no'}`],
    ['Parent', s.lineage.parentId ?? '—'],
    [
      'Labels',
      Object.entries(s.labels)
        .map(([k, v]) => `${k}=${v}`)
        .join(', ') || '—',
    ],
    // Values of env are not shown: they may hold secrets.
    ['Environment', Object.keys(s.env).join(', ') || '—'],
  ];
  return (
    <div class="grid2">
      <dl class="facts">
        {rows.map(([k, v]) => (
          <div key={k}>
            <dt>{k}</dt>
            <dd>{v}</dd>
          </div>
        ))}
      </dl>
      <Policies sandbox={s} onChanged={onChanged} />
    </div>
  );
}

const minutes = (ms: number | null) => (ms === null ? '' : String(Math.round(ms / 60_000)));

function Policies({ sandbox: s, onChanged }: { sandbox: Sandbox; onChanged: () => void }) {
  const [timeoutMin, setTimeoutMin] = useState(minutes(s.timeoutMs));
  const [idleMin, setIdleMin] = useState(minutes(s.idleTimeoutMs));
  const [keepaliveMin, setKeepaliveMin] = useState('10');
  const [error, setError] = useState<ApiError | undefined>(undefined);
  const [saved, setSaved] = useState('');
  const run = (label: string, call: Promise<unknown>) =>
    call
      .then(() => {
        setSaved(label);
        setError(undefined);
        onChanged();
      })
      .catch((caught: unknown) => caught instanceof ApiError && setError(caught));
  const toMs = (text: string) => (text.trim() === '' ? null : Math.round(Number(text) * 60_000));
  return (
    <div class="policies">
      <h2>Policies</h2>
      <table class="small">
        <tbody>
          {(
            [
              ['TTL', s.timeoutMs, 'timeoutMs'],
              ['On timeout', null, 'timeoutAction'],
              ['Idle timeout', s.idleTimeoutMs, 'idleTimeoutMs'],
              ['Max age', s.maxAgeMs, 'maxAgeMs'],
              ['Paused retention', s.pausedRetentionMs, 'pausedRetentionMs'],
            ] as const
          ).map(([label, value, key]) => (
            <tr key={key}>
              <th scope="row">{label}</th>
              <td>{key === 'timeoutAction' ? s.timeoutAction : value === null ? 'none' : formatSpan(value)}</td>
              <td class="muted">{s.policySources?.[key] ?? ''}</td>
            </tr>
          ))}
          <tr>
            <th scope="row">Next deadline</th>
            <td colSpan={2}>
              {s.expiry === null ? 'none' : `${s.expiry.action} at ${formatTime(s.expiry.at)} (${s.expiry.reason})`}
            </td>
          </tr>
        </tbody>
      </table>
      <form
        class="inline-form"
        onSubmit={(e) => {
          e.preventDefault();
          void run(
            'timeouts saved',
            api(`/sandboxes/${s.id}`, {
              method: 'PATCH',
              json: { timeoutMs: toMs(timeoutMin), idleTimeoutMs: toMs(idleMin) },
            }),
          );
        }}
      >
        <label>
          TTL from now (min){' '}
          <input
            inputMode="numeric"
            size={5}
            value={timeoutMin}
            onInput={(e) => setTimeoutMin(e.currentTarget.value)}
          />
        </label>
        <label>
          Idle timeout (min){' '}
          <input inputMode="numeric" size={5} value={idleMin} onInput={(e) => setIdleMin(e.currentTarget.value)} />
        </label>
        <button type="submit">Save</button>
      </form>
      <form
        class="inline-form"
        onSubmit={(e) => {
          e.preventDefault();
          void run(
            'kept alive',
            api(`/sandboxes/${s.id}/keepalive`, {
              method: 'POST',
              json: { durationMs: Number(keepaliveMin) * 60_000, extendTimeout: true },
            }),
          );
        }}
      >
        <label>
          Keep alive for (min){' '}
          <input
            inputMode="numeric"
            size={5}
            value={keepaliveMin}
            onInput={(e) => setKeepaliveMin(e.currentTarget.value)}
          />
        </label>
        <button type="submit">Keep alive</button>
      </form>
      {saved === '' ? null : (
        <p role="status" class="muted small">
          {saved}
        </p>
      )}
      <ErrorBox error={error} />
    </div>
  );
}
