import type { Sandbox, SandboxList, Template } from '@burrow/contract';
import { EVENT_TYPES } from '@burrow/contract/event-types';
import { memo } from 'preact/compat';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { ApiError, api } from '../api.js';
import { Confirm, Countdown, deadlineOf, ErrorBox, StateBadge } from '../components/ui.js';
import { useEventStream, useLoad, useNow } from '../util.js';

const STATES = ['running', 'paused', 'stopped', 'creating', 'pausing', 'resuming', 'error'] as const;
/** Height of a table row, px (CSS keeps every row this tall, so the table draws only the rows in view). */
const ROW_PX = 40;
/** Rows drawn above and below the ones in view. */
const OVERSCAN_ROWS = 8;
/** Pages of 200 (the API's largest) fetched for the live table. */
const PAGE_LIMIT = '200';

/** Every sandbox of the caller's tenant that matches `state` and `labels` (pages followed). */
export async function listAllSandboxes(state: string, labels: string[], signal?: AbortSignal): Promise<Sandbox[]> {
  const items: Sandbox[] = [];
  let cursor: string | undefined;
  do {
    const page: SandboxList = await api<SandboxList>('/sandboxes', {
      query: { limit: PAGE_LIMIT, cursor, state: state === '' ? undefined : state, label: labels },
      ...(signal === undefined ? {} : { signal }),
    });
    items.push(...page.items);
    cursor = page.nextCursor ?? undefined;
  } while (cursor !== undefined);
  return items;
}

const Row = memo(function Row({
  sandbox,
  now,
  selected,
  onSelect,
  index,
}: {
  sandbox: Sandbox;
  now: number;
  selected: boolean;
  onSelect: (id: string, on: boolean) => void;
  index: number;
}) {
  const deadline = deadlineOf(sandbox);
  return (
    <tr data-testid="sandbox-row" data-id={sandbox.id} aria-rowindex={index + 2}>
      <td>
        <input
          type="checkbox"
          checked={selected}
          aria-label={`select ${sandbox.id}`}
          onChange={(event) => onSelect(sandbox.id, event.currentTarget.checked)}
        />
      </td>
      <td>
        <a href={`#/sandboxes/${sandbox.id}`}>
          <code>{sandbox.id}</code>
        </a>
      </td>
      <td>
        <StateBadge state={sandbox.state} />
      </td>
      <td>{sandbox.template}</td>
      <td class="num">
        {sandbox.resources.cpuCount} CPU · {sandbox.resources.memoryMiB} MiB
      </td>
      <td class="labels">
        {Object.entries(sandbox.labels).map(([k, v]) => (
          <span key={k} class="label">
            {k}={v}
          </span>
        ))}
      </td>
      <td>
        {deadline === null ? (
          <span class="muted">none</span>
        ) : (
          <Countdown at={deadline.at} now={now} ticking={deadline.ticking} label={deadline.label} />
        )}
      </td>
    </tr>
  );
});

/** Sandboxes: the live table with filters, search, create and bulk actions. */
export function SandboxesPage() {
  const [state, setState] = useState('');
  const [label, setLabel] = useState('');
  const [search, setSearch] = useState('');
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [bulk, setBulk] = useState<'pause' | 'resume' | 'delete' | null>(null);
  const [actionError, setActionError] = useState<ApiError | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  const labels = label.trim() === '' ? [] : [label.trim()];
  const list = useLoad((signal) => listAllSandboxes(state, labels, signal), [state, label], 3000);
  useEventStream(() => list.reload(), EVENT_TYPES);
  const now = useNow(1000);
  const view = useRowWindow();
  const shown = useMemo(() => (list.data ?? []).filter((s) => s.id.includes(search.trim())), [list.data, search]);
  const onSelect = useMemo(
    () => (id: string, on: boolean) =>
      setSelected((old) => {
        const next = new Set(old);
        if (on) next.add(id);
        else next.delete(id);
        return next;
      }),
    [],
  );
  const runBulk = async (action: 'pause' | 'resume' | 'delete') => {
    setBulk(null);
    setBusy(true);
    setActionError(undefined);
    const errors: ApiError[] = [];
    await Promise.all(
      [...selected].map((id) =>
        (action === 'delete'
          ? api(`/sandboxes/${id}`, { method: 'DELETE' })
          : api(`/sandboxes/${id}/${action}`, { method: 'POST' })
        ).catch((caught: unknown) => {
          if (caught instanceof ApiError) errors.push(caught);
        }),
      ),
    );
    setBusy(false);
    setSelected(new Set());
    setActionError(errors[0]);
    list.reload();
  };
  return (
    <section aria-labelledby="sandboxes-title">
      <div class="title-row">
        <h1 id="sandboxes-title">Sandboxes</h1>
        <CreateSandbox onCreated={list.reload} />
      </div>
      <div class="toolbar">
        <label>
          State{' '}
          <select value={state} onChange={(event) => setState(event.currentTarget.value)}>
            <option value="">all</option>
            {STATES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
        <label>
          Label <input value={label} placeholder="key=value" onChange={(e) => setLabel(e.currentTarget.value)} />
        </label>
        <label>
          Search <input value={search} placeholder="sbx_…" onInput={(e) => setSearch(e.currentTarget.value)} />
        </label>
        <span class="spacer" />
        <span class="muted">{selected.size} selected</span>
        <button type="button" disabled={selected.size === 0 || busy} onClick={() => setBulk('pause')}>
          Pause
        </button>
        <button type="button" disabled={selected.size === 0 || busy} onClick={() => setBulk('resume')}>
          Resume
        </button>
        <button type="button" class="danger" disabled={selected.size === 0 || busy} onClick={() => setBulk('delete')}>
          Delete
        </button>
      </div>
      <ErrorBox error={actionError ?? list.error} />
      <div class="table-wrap sandboxes-wrap" ref={view.ref}>
        <table class="sandboxes" aria-rowcount={shown.length + 1}>
          <caption class="sr-only">Sandboxes of this tenant, updated live</caption>
          <thead>
            <tr>
              <th scope="col">
                <input
                  type="checkbox"
                  aria-label="select all shown"
                  checked={shown.length > 0 && shown.every((s) => selected.has(s.id))}
                  onChange={(e) => setSelected(e.currentTarget.checked ? new Set(shown.map((s) => s.id)) : new Set())}
                />
              </th>
              <th scope="col">ID</th>
              <th scope="col">State</th>
              <th scope="col">Template</th>
              <th scope="col">Resources</th>
              <th scope="col">Labels</th>
              <th scope="col">Next deadline</th>
            </tr>
          </thead>
          <tbody>
            {view.first > 0 ? (
              <tr style={{ height: `${view.first * ROW_PX}px` }}>
                <td colSpan={7} />
              </tr>
            ) : null}
            {shown.slice(view.first, view.last).map((sandbox, i) => (
              <Row
                key={sandbox.id}
                sandbox={sandbox}
                now={now}
                selected={selected.has(sandbox.id)}
                onSelect={onSelect}
                index={view.first + i}
              />
            ))}
            {view.last < shown.length ? (
              <tr style={{ height: `${(shown.length - view.last) * ROW_PX}px` }}>
                <td colSpan={7} />
              </tr>
            ) : null}
          </tbody>
        </table>
      </div>
      <p class="muted small" data-testid="sandbox-count">
        {list.data === undefined ? 'loading…' : `${shown.length} of ${list.data.length} sandboxes`}
      </p>
      <Confirm
        open={bulk !== null}
        title={`${bulk ?? ''} ${selected.size} sandbox${selected.size === 1 ? '' : 'es'}?`}
        confirmLabel={`Yes, ${bulk ?? ''}`}
        onConfirm={() => bulk !== null && void runBulk(bulk)}
        onCancel={() => setBulk(null)}
      >
        <p>{bulk === 'delete' ? 'Deleting removes each sandbox and its disk; it cannot be undone.' : ''}</p>
        <ul class="small">
          {[...selected].slice(0, 10).map((id) => (
            <li key={id}>
              <code>{id}</code>
            </li>
          ))}
        </ul>
      </Confirm>
    </section>
  );
}

/**
 * The rows of a scrolling table that are in view (plus {@link OVERSCAN_ROWS} each side): a table of hundreds of live
 * rows draws and lays out only a screenful each second.
 */
function useRowWindow() {
  const ref = useRef<HTMLDivElement>(null);
  const [scrollTop, setScrollTop] = useState(0);
  const [heightPx, setHeightPx] = useState(800);
  useEffect(() => {
    const element = ref.current;
    if (element === null) return;
    const onScroll = () => setScrollTop(element.scrollTop);
    const observer = new ResizeObserver(() => setHeightPx(element.clientHeight));
    observer.observe(element);
    element.addEventListener('scroll', onScroll, { passive: true });
    return () => {
      observer.disconnect();
      element.removeEventListener('scroll', onScroll);
    };
  }, []);
  const first = Math.max(0, Math.floor(scrollTop / ROW_PX) - OVERSCAN_ROWS);
  const last = Math.ceil((scrollTop + heightPx) / ROW_PX) + OVERSCAN_ROWS;
  return { ref, first, last };
}

function CreateSandbox({ onCreated }: { onCreated: () => void }) {
  const [open, setOpen] = useState(false);
  const [template, setTemplate] = useState('base');
  const [error, setError] = useState<ApiError | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  const templates = useLoad(() => api<{ items: Template[] }>('/templates'), [open]);
  if (!open) {
    return (
      <button type="button" class="primary" onClick={() => setOpen(true)}>
        New sandbox
      </button>
    );
  }
  return (
    <form
      class="inline-form"
      onSubmit={(event) => {
        event.preventDefault();
        setBusy(true);
        api<Sandbox>('/sandboxes', { method: 'POST', json: { template } })
          .then((sandbox) => {
            setOpen(false);
            onCreated();
            location.hash = `#/sandboxes/${sandbox.id}`;
          })
          .catch((caught: unknown) => setError(caught instanceof ApiError ? caught : undefined))
          .finally(() => setBusy(false));
      }}
    >
      <label>
        Template{' '}
        <select value={template} onChange={(e) => setTemplate(e.currentTarget.value)}>
          {(templates.data?.items ?? [{ name: 'base' } as Template]).map((t) => (
            <option key={t.name} value={t.name}>
              {t.name}
            </option>
          ))}
        </select>
      </label>
      <button type="submit" class="primary" disabled={busy}>
        {busy ? 'Creating…' : 'Create'}
      </button>
      <button type="button" onClick={() => setOpen(false)}>
        Cancel
      </button>
      <ErrorBox error={error} />
    </form>
  );
}
