import type { ApiKey, ConsoleSession, Quota, Template } from '@burrow/contract';
import { useState } from 'preact/hooks';
import { ApiError, api } from '../api.js';
import { Confirm, ErrorBox } from '../components/ui.js';
import { formatBytes, formatTime, useLoad } from '../util.js';
import { EventTimeline } from './sandbox-panels.js';

/** Answer of `POST /v1/keys`: the key and its secret, shown once. */
interface CreatedApiKey {
  key: ApiKey;
  secret: string;
}

/** Templates: name, state, parent, recipe and size. */
export function TemplatesPage() {
  const list = useLoad(() => api<{ items: Template[] }>('/templates'), [], 10_000);
  return (
    <section aria-labelledby="templates-title">
      <h1 id="templates-title">Templates</h1>
      <ErrorBox error={list.error} />
      <div class="table-wrap">
        <table>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">State</th>
              <th scope="col">From</th>
              <th scope="col">Packages</th>
              <th scope="col">Size</th>
              <th scope="col">Created</th>
            </tr>
          </thead>
          <tbody>
            {(list.data?.items ?? []).map((t) => (
              <tr key={t.name}>
                <td>
                  <code>{t.name}</code>
                </td>
                <td>
                  <span class={`badge badge-${t.state}`}>{t.state}</span>
                  {t.error === null ? null : <div class="error small">{t.error}</div>}
                </td>
                <td>{t.from ?? 'Debian'}</td>
                <td class="small">{t.apt.join(' ') || '—'}</td>
                <td class="num">{formatBytes(t.sizeBytes)}</td>
                <td class="small">{formatTime(t.createdAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}

/**
 * Keys: list (never a secret, only its prefix), create and revoke. A new key's secret is shown once, in a field the
 * user copies from; it is not kept anywhere by the console.
 */
export function KeysPage({ session }: { session: ConsoleSession }) {
  const list = useLoad(() => api<{ items: ApiKey[] }>('/keys'), []);
  const [name, setName] = useState('');
  const [role, setRole] = useState<'member' | 'admin'>('member');
  const [created, setCreated] = useState<CreatedApiKey | null>(null);
  const [revoking, setRevoking] = useState<ApiKey | null>(null);
  const [error, setError] = useState<ApiError | undefined>(undefined);
  const fail = (caught: unknown) => caught instanceof ApiError && setError(caught);
  return (
    <section aria-labelledby="keys-title">
      <h1 id="keys-title">API keys</h1>
      {session.role === 'admin' ? (
        <form
          class="inline-form"
          onSubmit={(e) => {
            e.preventDefault();
            api<CreatedApiKey>('/keys', { method: 'POST', json: { name, role } })
              .then((key) => {
                setCreated(key);
                setName('');
                list.reload();
              })
              .catch(fail);
          }}
        >
          <label>
            Name <input value={name} required onInput={(e) => setName(e.currentTarget.value)} />
          </label>
          <label>
            Role{' '}
            <select value={role} onChange={(e) => setRole(e.currentTarget.value as 'member' | 'admin')}>
              <option value="member">member</option>
              <option value="admin">admin</option>
            </select>
          </label>
          <button type="submit" class="primary">
            Create key
          </button>
        </form>
      ) : (
        <p class="muted">Only an admin key creates and revokes keys.</p>
      )}
      {created === null ? null : (
        <div class="notice" role="status">
          <p>
            Key <code>{created.key.id}</code> created. Copy its secret now: it is not shown again.
          </p>
          <input
            readOnly
            value={created.secret}
            aria-label="the new key's secret"
            onFocus={(e) => e.currentTarget.select()}
          />{' '}
          <button type="button" onClick={() => setCreated(null)}>
            Done
          </button>
        </div>
      )}
      <ErrorBox error={error ?? list.error} />
      <div class="table-wrap">
        <table>
          <thead>
            <tr>
              <th scope="col">ID</th>
              <th scope="col">Name</th>
              <th scope="col">Tenant</th>
              <th scope="col">Role</th>
              <th scope="col">Prefix</th>
              <th scope="col">Created</th>
              <th scope="col">Revoked</th>
              <th scope="col">
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {(list.data?.items ?? []).map((k) => (
              <tr key={k.id} class={k.revokedAt === null ? '' : 'muted'}>
                <td>
                  <code>{k.id}</code>
                  {k.id === session.keyId ? <span class="label">this session</span> : null}
                </td>
                <td>{k.name}</td>
                <td>{k.tenantId}</td>
                <td>{k.role}</td>
                <td>
                  <code>{k.prefix}…</code>
                </td>
                <td class="small">{formatTime(k.createdAt)}</td>
                <td class="small">{formatTime(k.revokedAt)}</td>
                <td>
                  {k.revokedAt === null && session.role === 'admin' ? (
                    <button type="button" class="danger" onClick={() => setRevoking(k)}>
                      Revoke
                    </button>
                  ) : null}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <Confirm
        open={revoking !== null}
        title={`Revoke ${revoking?.name ?? ''}?`}
        confirmLabel="Yes, revoke"
        onCancel={() => setRevoking(null)}
        onConfirm={() => {
          const key = revoking;
          setRevoking(null);
          if (key !== null) api(`/keys/${key.id}`, { method: 'DELETE' }).then(list.reload).catch(fail);
        }}
      >
        <p>
          Requests with this key fail from then on
          {revoking?.id === session.keyId ? ', this console session included' : ''}.
        </p>
      </Confirm>
    </section>
  );
}

/** Quota and usage of the caller's tenant. */
export function QuotaPage() {
  const quota = useLoad(() => api<Quota>('/quota'), [], 5000);
  const q = quota.data;
  return (
    <section aria-labelledby="quota-title">
      <h1 id="quota-title">Quota and usage</h1>
      <ErrorBox error={quota.error} />
      {q === undefined ? null : (
        <>
          <p>
            Tenant <code>{q.tenantId}</code>
          </p>
          <table class="quota">
            <thead>
              <tr>
                <th scope="col">Resource</th>
                <th scope="col">Used</th>
                <th scope="col">Limit</th>
                <th scope="col">
                  <span class="sr-only">Share</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {Object.entries(q.limits).map(([key, limit]) => {
                const usageKey = key.replace(/^max(.)/, (_m, c: string) => c.toLowerCase());
                const used = (q.usage as Record<string, number | undefined>)[usageKey] ?? null;
                const share = typeof limit === 'number' && limit > 0 && used !== null ? used / limit : null;
                const show = (n: number | null) =>
                  n === null ? '—' : usageKey === 'diskBytes' ? formatBytes(n) : String(n);
                return (
                  <tr key={key}>
                    <th scope="row">{usageKey}</th>
                    <td class="num">{show(used)}</td>
                    <td class="num">{limit === null ? 'unlimited' : show(limit)}</td>
                    <td>
                      {share === null ? null : <meter min={0} max={1} value={share} aria-label={`${key} used`} />}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </>
      )}
    </section>
  );
}

/** Events across the tenant, live. */
export function EventsPage() {
  return (
    <section aria-labelledby="events-title">
      <h1 id="events-title">Events</h1>
      <EventTimeline />
    </section>
  );
}
