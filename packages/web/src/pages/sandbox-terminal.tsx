import type { CommandInfo, Sandbox } from '@burrow/contract';
import { FitAddon } from '@xterm/addon-fit';
import { Terminal } from '@xterm/xterm';
import '@xterm/xterm/css/xterm.css';
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, api } from '../api.js';
import { ErrorBox } from '../components/ui.js';

/** Session storage key of the shell a sandbox's terminal attaches to (reattached after a pause or a reload). */
const shellKey = (sandboxId: string) => `burrow.terminal.${sandboxId}`;

async function shellFor(sandboxId: string, cols: number, rows: number): Promise<CommandInfo> {
  const known = sessionStorage.getItem(shellKey(sandboxId));
  if (known !== null) {
    const info = await api<CommandInfo>(`/sandboxes/${sandboxId}/commands/${known}`).catch(() => null);
    if (info !== null && info.status === 'running') return info;
  }
  const info = await api<CommandInfo>(`/sandboxes/${sandboxId}/commands`, {
    method: 'POST',
    json: { cmd: ['bash', '-l'], env: {}, pty: { cols, rows, term: 'xterm-256color' } },
  });
  sessionStorage.setItem(shellKey(sandboxId), info.commandId);
  return info;
}

type Status = 'connecting' | 'connected' | 'waiting' | 'exited';

/**
 * A terminal on a PTY shell in the sandbox (a background command, so it outlives the page, pauses and server
 * restarts), attached over the command's WebSocket stream from the last byte received.
 */
export function TerminalPanel({ sandbox }: { sandbox: Sandbox }) {
  const host = useRef<HTMLDivElement>(null);
  const [status, setStatus] = useState<Status>('connecting');
  const [error, setError] = useState<ApiError | undefined>(undefined);
  const running = sandbox.state === 'running';
  const runningRef = useRef(running);
  runningRef.current = running;
  const [generation, setGeneration] = useState(0);

  useEffect(() => {
    const element = host.current;
    if (element === null) return;
    const term = new Terminal({ convertEol: false, cursorBlink: true, fontSize: 14, scrollback: 5000 });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(element);
    fit.fit();
    let socket: WebSocket | null = null;
    let closed = false;
    let offset = 0;
    let commandId: string | null = null;
    let retry: ReturnType<typeof setTimeout> | undefined;
    const encoder = new TextEncoder();

    const sendJson = (frame: object) => {
      if (socket?.readyState === WebSocket.OPEN) socket.send(JSON.stringify(frame));
    };
    const connect = async () => {
      if (closed) return;
      if (!runningRef.current) {
        setStatus('waiting');
        retry = setTimeout(() => void connect(), 1000);
        return;
      }
      setStatus('connecting');
      try {
        if (commandId === null) {
          const info = await shellFor(sandbox.id, term.cols, term.rows);
          commandId = info.commandId;
          offset = info.firstOffset;
        }
      } catch (caught) {
        if (caught instanceof ApiError) setError(caught);
        retry = setTimeout(() => void connect(), 2000);
        return;
      }
      const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
      const url = `${scheme}://${location.host}/v1/sandboxes/${sandbox.id}/commands/${commandId}/stream?offset=${offset}&follow=true`;
      const ws = new WebSocket(url);
      ws.binaryType = 'arraybuffer';
      socket = ws;
      let exited = false;
      ws.onmessage = (message) => {
        if (typeof message.data === 'string') {
          const frame = JSON.parse(message.data) as { type: string; offset?: number; message?: string };
          if (frame.type === 'attached') {
            offset = frame.offset ?? offset;
            setStatus('connected');
            setError(undefined);
            sendJson({ type: 'resize', cols: term.cols, rows: term.rows });
          } else if (frame.type === 'exit') {
            exited = true;
            setStatus('exited');
            sessionStorage.removeItem(shellKey(sandbox.id));
            term.write('\r\n[the shell exited]\r\n');
          } else if (frame.type === 'error') {
            setError(
              new ApiError(0, 'stream_error', frame.message ?? 'the terminal stream failed', undefined, undefined),
            );
          }
          return;
        }
        const bytes = new Uint8Array(message.data as ArrayBuffer);
        offset += bytes.length - 1;
        term.write(bytes.subarray(1));
      };
      ws.onclose = () => {
        if (socket === ws) socket = null;
        if (closed || exited) return;
        setStatus('waiting');
        retry = setTimeout(() => void connect(), 1000);
      };
    };
    const input = term.onData((data) => {
      if (socket?.readyState !== WebSocket.OPEN) return;
      const bytes = encoder.encode(data);
      const frame = new Uint8Array(bytes.length + 1);
      frame.set(bytes, 1);
      socket.send(frame);
    });
    const resize = term.onResize(({ cols, rows }) => sendJson({ type: 'resize', cols, rows }));
    const observer = new ResizeObserver(() => fit.fit());
    observer.observe(element);
    void connect();
    term.focus();
    return () => {
      closed = true;
      clearTimeout(retry);
      observer.disconnect();
      input.dispose();
      resize.dispose();
      socket?.close();
      term.dispose();
    };
  }, [sandbox.id, generation]);

  return (
    <div class="terminal-panel">
      <div class="toolbar">
        <span role="status" data-testid="terminal-status">
          {status === 'waiting' && !running ? `waiting for the sandbox (${sandbox.state})` : status}
        </span>
        <span class="spacer" />
        <button
          type="button"
          onClick={() => {
            sessionStorage.removeItem(shellKey(sandbox.id));
            setGeneration((n) => n + 1);
          }}
        >
          New shell
        </button>
      </div>
      <ErrorBox error={error} />
      <div ref={host} class="terminal" data-testid="terminal" />
    </div>
  );
}
