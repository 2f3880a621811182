import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError } from './api.js';

/** `n` bytes as B, KiB, MiB or GiB. */
export function formatBytes(n: number | null | undefined): string {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value >= 10 || unit === 0 ? Math.round(value) : value.toFixed(1)} ${units[unit]}`;
}

/** A span in milliseconds as `1d 2h`, `3m 04s`, `12s`; negative spans as `0s`. */
export function formatSpan(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '—';
  const s = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  if (d > 0) return `${d}d ${h}h`;
  if (h > 0) return `${h}h ${String(m).padStart(2, '0')}m`;
  if (m > 0) return `${m}m ${String(sec).padStart(2, '0')}s`;
  return `${sec}s`;
}

/** An ISO instant in the viewer's locale. */
export function formatTime(iso: string | null | undefined): string {
  return iso === null || iso === undefined ? '—' : new Date(iso).toLocaleString();
}

/** The clock, re-read every `everyMs` (one timer per caller). */
export function useNow(everyMs = 1000, active = true): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    if (!active) return;
    const timer = setInterval(() => setNow(Date.now()), everyMs);
    return () => clearInterval(timer);
  }, [everyMs, active]);
  return now;
}

/** State of a {@link useLoad} call. */
export interface Loaded<T> {
  data: T | undefined;
  error: ApiError | undefined;
  reload: () => void;
}

/**
 * Load with `load` on mount, when `deps` change, every `pollMs` (if given) and on `reload()`. Keeps the last data
 * while a reload runs or fails (a restarting server shows stale data with an error, not a blank page).
 */
export function useLoad<T>(load: (signal: AbortSignal) => Promise<T>, deps: unknown[], pollMs?: number): Loaded<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<ApiError | undefined>(undefined);
  const [tick, setTick] = useState(0);
  const loadRef = useRef(load);
  loadRef.current = load;
  useEffect(() => {
    const abort = new AbortController();
    loadRef
      .current(abort.signal)
      .then((value) => {
        if (abort.signal.aborted) return;
        setData(value);
        setError(undefined);
      })
      .catch((caught: unknown) => {
        if (abort.signal.aborted) return;
        setError(
          caught instanceof ApiError ? caught : new ApiError(0, 'client_error', String(caught), undefined, undefined),
        );
      });
    return () => abort.abort();
  }, [...deps, tick]);
  useEffect(() => {
    if (pollMs === undefined) return;
    const timer = setInterval(() => setTick((n) => n + 1), pollMs);
    return () => clearInterval(timer);
  }, [pollMs]);
  return { data, error, reload: () => setTick((n) => n + 1) };
}

/** The current `location.hash` route, split on `/` (`#/sandboxes/sbx_1/files` → ['sandboxes', 'sbx_1', 'files']). */
export function useRoute(): string[] {
  const read = () =>
    location.hash
      .replace(/^#\/?/, '')
      .split('?')[0]
      ?.split('/')
      .filter((part) => part !== '')
      .map(decodeURIComponent) ?? [];
  const [route, setRoute] = useState(read);
  useEffect(() => {
    const onChange = () => setRoute(read());
    addEventListener('hashchange', onChange);
    return () => removeEventListener('hashchange', onChange);
  }, []);
  return route;
}

/**
 * Follow the server's event stream (`/v1/events/stream`, optionally for one sandbox), calling `onEvent` with each
 * event. EventSource reconnects by itself after a restart and resumes from the last event id.
 */
export function useEventStream<E>(onEvent: (event: E) => void, types: readonly string[], sandboxId?: string): boolean {
  const [open, setOpen] = useState(false);
  const handler = useRef(onEvent);
  handler.current = onEvent;
  useEffect(() => {
    const query = sandboxId === undefined ? '' : `?sandboxId=${encodeURIComponent(sandboxId)}`;
    const source = new EventSource(`/v1/events/stream${query}`);
    const listener = (message: MessageEvent<string>) => {
      try {
        handler.current(JSON.parse(message.data) as E);
      } catch {
        // a frame that is not JSON is not an event
      }
    };
    for (const type of types) source.addEventListener(type, listener);
    source.onopen = () => setOpen(true);
    source.onerror = () => setOpen(false);
    return () => source.close();
  }, [sandboxId, types]);
  return open;
}
