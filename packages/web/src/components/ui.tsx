import type { Sandbox } from '@burrow/contract';
import type { ComponentChildren } from 'preact';
import { useEffect, useRef } from 'preact/hooks';
import type { ApiError } from '../api.js';
import { formatSpan } from '../util.js';

/** A sandbox state as a coloured badge (colour plus text: never colour alone). */
export function StateBadge({ state }: { state: string }) {
  return (
    <span class={`badge badge-${state}`} data-testid="state-badge">
      {state}
    </span>
  );
}

/**
 * The deadline a sandbox shows: its policy expiry while its clock runs; else (paused, stopped) the TTL deadline, shown
 * stopped (the server does not count a TTL down while the sandbox is not running); else none.
 */
export function deadlineOf(sandbox: Sandbox): { at: string; label: string; ticking: boolean } | null {
  if (sandbox.expiry !== null)
    return { at: sandbox.expiry.at, label: sandbox.expiry.action, ticking: sandbox.state === 'running' };
  if (sandbox.timeoutAt !== null) return { at: sandbox.timeoutAt, label: sandbox.timeoutAction, ticking: false };
  return null;
}

/**
 * Time left until `at`, ticking with `now` while `ticking`; stopped, it shows the time left frozen at `frozenAt`.
 */
export function Countdown({ at, now, ticking, label }: { at: string; now: number; ticking: boolean; label: string }) {
  const frozen = useRef<number | null>(null);
  if (ticking) frozen.current = null;
  else frozen.current ??= now;
  const left = Date.parse(at) - (ticking ? now : (frozen.current ?? now));
  return (
    <span
      class={ticking ? 'countdown' : 'countdown stopped'}
      data-testid="countdown"
      data-ticking={String(ticking)}
      title={`${label} at ${at}`}
    >
      {label} in {formatSpan(left)}
      {ticking ? '' : ' (stopped)'}
    </span>
  );
}

/** An API error with its hint and request id. */
export function ErrorBox({ error }: { error: ApiError | undefined }) {
  if (error === undefined) return null;
  return (
    <div class="error" role="alert">
      <strong>{error.message}</strong> <code>{error.code}</code>
      {error.hint === undefined ? null : <div class="hint">{error.hint}</div>}
      {error.requestId === undefined ? null : <div class="muted small">request {error.requestId}</div>}
    </div>
  );
}

/** A modal confirmation (native `<dialog>`: focus trap and Escape included). */
export function Confirm({
  open,
  title,
  children,
  confirmLabel,
  onConfirm,
  onCancel,
}: {
  open: boolean;
  title: string;
  children?: ComponentChildren;
  confirmLabel: string;
  onConfirm: () => void;
  onCancel: () => void;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const dialog = ref.current;
    if (dialog === null) return;
    if (open && !dialog.open) dialog.showModal();
    if (!open && dialog.open) dialog.close();
  }, [open]);
  return (
    <dialog ref={ref} onCancel={onCancel} aria-labelledby="confirm-title">
      <h2 id="confirm-title">{title}</h2>
      {children}
      <div class="row">
        <button type="button" class="danger" onClick={onConfirm}>
          {confirmLabel}
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </dialog>
  );
}

/** A line chart of `values` (null gaps allowed) scaled to `max`, with an accessible summary. */
export function LineChart({
  values,
  max,
  label,
  format,
}: {
  values: (number | null)[];
  max: number;
  label: string;
  format: (v: number) => string;
}) {
  const width = 300;
  const height = 80;
  const top = Math.max(max, ...values.map((v) => v ?? 0), 1e-9);
  const step = values.length > 1 ? width / (values.length - 1) : width;
  let path = '';
  values.forEach((value, i) => {
    if (value === null) return;
    const x = (i * step).toFixed(1);
    const y = (height - (value / top) * height).toFixed(1);
    path += `${path === '' || values[i - 1] === null ? 'M' : 'L'}${x},${y} `;
  });
  const last = [...values].reverse().find((v) => v !== null) ?? null;
  return (
    <figure class="chart">
      <figcaption>
        {label}: <strong data-testid={`metric-${label.toLowerCase()}`}>{last === null ? '—' : format(last)}</strong>
        <span class="muted"> of {format(max)}</span>
      </figcaption>
      <svg viewBox={`0 0 ${width} ${height}`} preserveAspectRatio="none" role="img" aria-label={`${label} over time`}>
        <path d={path} fill="none" stroke="currentColor" stroke-width="2" vector-effect="non-scaling-stroke" />
      </svg>
    </figure>
  );
}
