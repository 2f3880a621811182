import type { ConsoleSession } from '@burrow/contract';
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { ApiError, api, onReachability, signedOut } from './api.js';
import { ErrorBox } from './components/ui.js';
import { SandboxPage } from './pages/sandbox.js';
import { SandboxesPage } from './pages/sandboxes.js';
import { EventsPage, KeysPage, QuotaPage, TemplatesPage } from './pages/tenant.js';
import { useRoute } from './util.js';
import './styles.css';

const NAV = [
  ['sandboxes', 'Sandboxes'],
  ['templates', 'Templates'],
  ['keys', 'Keys'],
  ['quota', 'Quota & usage'],
  ['events', 'Events'],
] as const;

function App() {
  const [session, setSession] = useState<ConsoleSession | null | undefined>(undefined);
  const [up, setUp] = useState(true);
  const route = useRoute();
  useEffect(() => onReachability(setUp), []);
  useEffect(() => {
    const onSignedOut = () => setSession(null);
    signedOut.add(onSignedOut);
    api<ConsoleSession>('/console/session')
      .then(setSession)
      .catch(() => setSession(null));
    return () => signedOut.delete(onSignedOut);
  }, []);
  if (session === undefined) return <p class="loading">Loading…</p>;
  if (session === null) return <SignIn onSignedIn={setSession} />;
  const page = route[0] ?? 'sandboxes';
  return (
    <div class="shell">
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header>
        <a class="brand" href="#/sandboxes">
          Burrow
        </a>
        <nav aria-label="Main">
          {NAV.map(([id, label]) => (
            <a key={id} href={`#/${id}`} aria-current={page === id ? 'page' : undefined}>
              {label}
            </a>
          ))}
        </nav>
        <span class="who" title={`key ${session.keyId}`}>
          {session.tenantId} · {session.role}
        </span>
        <button
          type="button"
          onClick={() => {
            void api('/console/session', { method: 'DELETE' }).finally(() => setSession(null));
          }}
        >
          Sign out
        </button>
      </header>
      {up ? null : (
        <div class="banner" role="status">
          The server cannot be reached; reconnecting…
        </div>
      )}
      <main id="main">
        {page === 'sandboxes' && route[1] !== undefined ? (
          <SandboxPage id={route[1]} tab={route[2] ?? 'overview'} />
        ) : page === 'templates' ? (
          <TemplatesPage />
        ) : page === 'keys' ? (
          <KeysPage session={session} />
        ) : page === 'quota' ? (
          <QuotaPage />
        ) : page === 'events' ? (
          <EventsPage />
        ) : (
          <SandboxesPage />
        )}
      </main>
    </div>
  );
}

function SignIn({ onSignedIn }: { onSignedIn: (session: ConsoleSession) => void }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState<ApiError | undefined>(undefined);
  const expired = new URLSearchParams(location.search).get('signin') === 'link-expired';
  return (
    <main class="signin">
      <h1>Burrow</h1>
      <form
        onSubmit={(event) => {
          event.preventDefault();
          api<ConsoleSession>('/console/session', { method: 'POST', json: { apiKey: key.trim() } })
            .then((session) => {
              setKey('');
              history.replaceState(null, '', '/#/sandboxes');
              onSignedIn(session);
            })
            .catch((caught: unknown) => setError(caught instanceof ApiError ? caught : undefined));
        }}
      >
        {expired ? <p role="alert">That login link was used or has expired; run `burrow ui` again.</p> : null}
        <label for="api-key">API key</label>
        <input
          id="api-key"
          type="password"
          autoComplete="off"
          value={key}
          onInput={(event) => setKey(event.currentTarget.value)}
          placeholder="bk_…"
          required
        />
        <button type="submit">Sign in</button>
        <p class="muted small">
          Or run <code>burrow ui</code> for a one-time login link. The key is kept in an HttpOnly cookie, out of reach
          of scripts.
        </p>
        <ErrorBox error={error} />
      </form>
    </main>
  );
}

const root = document.getElementById('app');
if (root !== null) render(<App />, root);
