import type { Event as BurrowEvent, CommandInfo, Sandbox, SandboxMetrics } from '@burrow/contract';
import { EVENT_TYPES } from '@burrow/contract/event-types';
import { useEffect, useState } from 'preact/hooks';
import { api } from '../api.js';
import { ErrorBox, LineChart } from '../components/ui.js';
import { formatBytes, formatTime, useEventStream, useLoad } from '../util.js';

/** Most output bytes kept in a command's output view; older output scrolls away. */
const OUTPUT_KEEP_BYTES = 256 * 1024;

/** Commands: running and finished background commands, each one's output (live while it runs). */
export function CommandsPanel({ sandbox }: { sandbox: Sandbox }) {
  const list = useLoad(() => api<{ items: CommandInfo[] }>(`/sandboxes/${sandbox.id}/commands`), [sandbox.id], 3000);
  const [open, setOpen] = useState<CommandInfo | null>(null);
  const items = [...(list.data?.items ?? [])].reverse();
  return (
    <div class="grid2">
      <div class="table-wrap">
        <ErrorBox error={list.error} />
        <table>
          <thead>
            <tr>
              <th scope="col">Command</th>
              <th scope="col">Status</th>
              <th scope="col">Started</th>
            </tr>
          </thead>
          <tbody>
            {items.map((c) => (
              <tr key={c.commandId} data-testid="command-row">
                <td>
                  <button type="button" class="link" onClick={() => setOpen(c)} title={c.commandId}>
                    <code>{c.argv.join(' ')}</code>
                  </button>
                  {c.pty ? <span class="label">pty</span> : null}
                </td>
                <td>
                  {c.status}
                  {c.exitCode === null ? '' : ` (${c.exitCode})`}
                  {c.timedOut ? ' timed out' : ''}
                </td>
                <td class="small">{formatTime(c.startedAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
        {items.length === 0 ? <p class="muted">No background commands.</p> : null}
      </div>
      {open === null ? null : <CommandOutput key={open.commandId} sandboxId={sandbox.id} command={open} />}
    </div>
  );
}

function CommandOutput({ sandboxId, command }: { sandboxId: string; command: CommandInfo }) {
  const [text, setText] = useState('');
  const [state, setState] = useState('attaching');
  useEffect(() => {
    const follow = command.status === 'running';
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    const ws = new WebSocket(
      `${scheme}://${location.host}/v1/sandboxes/${sandboxId}/commands/${command.commandId}/stream?offset=${command.firstOffset}&follow=${follow}`,
    );
    ws.binaryType = 'arraybuffer';
    const decoder = new TextDecoder();
    ws.onmessage = (message) => {
      if (typeof message.data === 'string') {
        const frame = JSON.parse(message.data) as { type: string; exitCode?: number | null; message?: string };
        if (frame.type === 'attached') setState(follow ? 'live' : 'reading');
        else if (frame.type === 'exit') setState(`exited ${frame.exitCode ?? ''}`);
        else if (frame.type === 'end') setState('end of output so far');
        else if (frame.type === 'error') setState(`error: ${frame.message ?? ''}`);
        return;
      }
      const chunk = decoder.decode(new Uint8Array(message.data as ArrayBuffer).subarray(1), { stream: true });
      setText((old) => (old + chunk).slice(-OUTPUT_KEEP_BYTES));
    };
    ws.onclose = () => setState((old) => (old === 'live' ? 'disconnected' : old));
    return () => ws.close();
  }, [sandboxId, command.commandId, command.status, command.firstOffset]);
  return (
    <figure class="preview">
      <figcaption>
        <code>{command.argv.join(' ')}</code> <span class="muted">{state}</span>
      </figcaption>
      <pre class="output">{text}</pre>
    </figure>
  );
}

/** Events of one sandbox: the stored history, then live from the SSE stream. */
export function EventsPanel({ sandbox }: { sandbox: Sandbox }) {
  return <EventTimeline sandboxId={sandbox.id} />;
}

/** An event timeline (one sandbox, or the whole tenant without `sandboxId`), newest first, updated live. */
export function EventTimeline({ sandboxId }: { sandboxId?: string }) {
  const history = useLoad(
    () => api<{ items: BurrowEvent[] }>('/events', { query: { sandboxId, limit: '200' } }),
    [sandboxId],
  );
  const [live, setLive] = useState<BurrowEvent[]>([]);
  const connected = useEventStream<BurrowEvent>(
    (event) => setLive((old) => [event, ...old].slice(0, 500)),
    EVENT_TYPES,
    sandboxId,
  );
  const seen = new Set(live.map((e) => e.id));
  const events = [...live, ...[...(history.data?.items ?? [])].reverse().filter((e) => !seen.has(e.id))];
  return (
    <div>
      <p class="muted small" role="status">
        {connected ? 'live' : 'reconnecting to the event stream…'}
      </p>
      <ErrorBox error={history.error} />
      <ol class="timeline" data-testid="event-timeline">
        {events.map((e) => (
          <li key={e.id}>
            <time dateTime={e.at}>{formatTime(e.at)}</time> <strong>{e.type}</strong>{' '}
            {sandboxId === undefined && e.sandboxId !== null ? (
              <a href={`#/sandboxes/${e.sandboxId}/events`}>
                <code>{e.sandboxId}</code>
              </a>
            ) : null}{' '}
            {e.message}{' '}
            <span class="muted small">
              ({e.reason}, {e.actor})
            </span>
          </li>
        ))}
      </ol>
      {events.length === 0 ? <p class="muted">No events yet.</p> : null}
    </div>
  );
}

/** CPU, memory and disk over the server's sampling window. */
export function MetricsPanel({ sandbox }: { sandbox: Sandbox }) {
  const metrics = useLoad(() => api<SandboxMetrics>(`/sandboxes/${sandbox.id}/metrics`), [sandbox.id], 5000);
  const m = metrics.data;
  if (m === undefined) return <ErrorBox error={metrics.error} />;
  const mib = 1024 * 1024;
  let lastDisk: number | null = null;
  const disk = m.samples.map((s) => {
    lastDisk = s.diskBytes ?? lastDisk;
    return lastDisk;
  });
  return (
    <div>
      <ErrorBox error={metrics.error} />
      <p class="muted small">
        A sample every {m.intervalMs / 1000} s, the last {Math.round(m.windowMs / 60_000)} minutes kept (
        {m.samples.length} samples). Only a running sandbox is sampled.
      </p>
      <div class="charts">
        <LineChart
          label="CPU"
          values={m.samples.map((s) => s.cpuPercent)}
          max={m.limits.cpuCount * 100}
          format={(v) => `${v.toFixed(1)} %`}
        />
        <LineChart
          label="Memory"
          values={m.samples.map((s) => s.memoryBytes)}
          max={m.limits.memoryMiB * mib}
          format={formatBytes}
        />
        <LineChart label="Disk" values={disk} max={m.limits.diskMiB * mib} format={formatBytes} />
      </div>
    </div>
  );
}
