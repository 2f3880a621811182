// The console's only way to the server: same-origin fetches signed in by the HttpOnly session cookie. The key's
// secret never reaches this script (sign-in posts it once; the server answers with the cookie).

/** An API error as the console shows it: the server's code, message, hint and request id. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly hint: string | undefined,
    readonly requestId: string | undefined,
  ) {
    super(message);
  }
}

/** Listeners told whether the server answers (false while it is down or restarting). */
const reachability = new Set<(up: boolean) => void>();
let serverUp = true;

/** Subscribe to the server's reachability; returns the unsubscribe function. */
export function onReachability(listener: (up: boolean) => void): () => void {
  reachability.add(listener);
  listener(serverUp);
  return () => reachability.delete(listener);
}

function setReachable(up: boolean): void {
  if (up === serverUp) return;
  serverUp = up;
  for (const listener of reachability) listener(up);
  if (!up) void waitForServer();
}

async function waitForServer(): Promise<void> {
  while (!serverUp) {
    await new Promise((resolve) => setTimeout(resolve, 1000));
    try {
      const response = await fetch('/v1/health', { cache: 'no-store' });
      if (response.ok) setReachable(true);
    } catch {
      // still down
    }
  }
}

/** Listeners told when the session ends (a 401): the console goes back to sign-in. */
export const signedOut = new Set<() => void>();

/** Options of {@link api}. */
export interface ApiOptions {
  method?: string;
  json?: unknown;
  body?: BodyInit;
  query?: Record<string, string | string[] | undefined>;
  signal?: AbortSignal;
  headers?: Record<string, string>;
}

/** URL of `/v1<path>` with `query`. */
export function apiUrl(path: string, query: ApiOptions['query'] = {}): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (value === undefined) continue;
    for (const one of Array.isArray(value) ? value : [value]) params.append(name, one);
  }
  const search = params.toString();
  return `/v1${path}${search === '' ? '' : `?${search}`}`;
}

/**
 * Call `/v1<path>`; resolves with the parsed JSON body (undefined for 204).
 * @throws ApiError with the server's envelope, or `network_error` when the server cannot be reached
 */
export async function api<T>(path: string, options: ApiOptions = {}): Promise<T> {
  const method = options.method ?? 'GET';
  const headers: Record<string, string> = { ...options.headers };
  if (method !== 'GET' && method !== 'HEAD') headers['x-burrow-csrf'] = '1';
  let body = options.body;
  if (options.json !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(options.json);
  }
  let response: Response;
  try {
    response = await fetch(apiUrl(path, options.query), {
      method,
      headers,
      credentials: 'same-origin',
      ...(body === undefined ? {} : { body }),
      ...(options.signal === undefined ? {} : { signal: options.signal }),
    });
  } catch (error) {
    if ((error as Error).name === 'AbortError') throw error;
    setReachable(false);
    throw new ApiError(
      0,
      'network_error',
      'the server cannot be reached',
      'it may be restarting; the console retries',
      undefined,
    );
  }
  setReachable(true);
  if (response.status === 204) return undefined as T;
  const text = await response.text();
  const parsed = text === '' ? undefined : safeJson(text);
  if (!response.ok) throw toApiError(response.status, parsed);
  return parsed as T;
}

/** The {@link ApiError} of an error answer's body. */
export function toApiError(status: number, parsed: unknown): ApiError {
  const error = (parsed as { error?: { code?: string; message?: string; hint?: string; requestId?: string } })?.error;
  if (status === 401) for (const listener of signedOut) listener();
  return new ApiError(
    status,
    error?.code ?? 'http_error',
    error?.message ?? `the server answered ${status}`,
    error?.hint,
    error?.requestId,
  );
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * Upload `file` to `path` in a sandbox, reporting progress (XMLHttpRequest: fetch has no upload progress).
 * @throws ApiError as {@link api}
 */
export function uploadFile(
  sandboxId: string,
  path: string,
  file: Blob,
  onProgress: (fraction: number) => void,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const request = new XMLHttpRequest();
    request.open('PUT', apiUrl(`/sandboxes/${sandboxId}/files/content`, { path }));
    request.setRequestHeader('content-type', 'application/octet-stream');
    request.setRequestHeader('x-burrow-csrf', '1');
    request.upload.onprogress = (event) => {
      if (event.lengthComputable) onProgress(event.loaded / event.total);
    };
    request.onload = () => {
      if (request.status < 300) {
        onProgress(1);
        resolve();
      } else reject(toApiError(request.status, safeJson(request.responseText)));
    };
    request.onerror = () =>
      reject(new ApiError(0, 'network_error', 'the upload did not reach the server', undefined, undefined));
    request.send(file);
  });
}
