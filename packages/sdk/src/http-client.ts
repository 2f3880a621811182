import { type ConnectionOptions, type ResolvedConnection, resolveConnection } from './connection-config.js';
import { ErrorEnvelopeParser, INVALID, type WireParser } from './contract-wire.js';
import { AbortedError, BurrowError, ClientErrorCode, ConnectionError, errorFromWire, ProtocolError } from './errors.js';
import { type FileDownloadOutcome, getIntoFile, LocalFileFailure } from './node-file-download.js';

/** A query string value: repeated keys come from arrays; undefined values are left out. */
export type QueryValue = string | number | boolean | undefined | readonly string[];

/** One HTTP call to the API. */
export interface RequestOptions {
  /** Query parameters. */
  query?: Record<string, QueryValue> | undefined;
  /** A JSON body. */
  json?: unknown;
  /** A raw body, sent as `application/octet-stream` (or {@link contentType}); streams are sent as they are read. */
  body?: Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array> | undefined;
  /** Content type of a raw {@link body}. @default 'application/octet-stream' */
  contentType?: string | undefined;
  /** Extra headers. */
  headers?: Record<string, string> | undefined;
  /** Cancels the request. */
  signal?: AbortSignal | undefined;
}

/**
 * Thin fetch wrapper shared by every SDK capability: adds the key, maps error envelopes to {@link BurrowError}s,
 * wraps network failures in {@link ConnectionError}. Internal to the SDK.
 */
export class HttpClient {
  readonly connection: ResolvedConnection;

  constructor(options: ConnectionOptions = {}) {
    this.connection = resolveConnection(options);
  }

  /** Full URL of an API path (`/sandboxes` → `<apiUrl>/v1/sandboxes`), with its query string. */
  url(path: string, query?: Record<string, QueryValue>): URL {
    const url = new URL(`${this.connection.apiUrl}/v1${path}`);
    for (const [key, value] of Object.entries(query ?? {})) {
      if (value === undefined) continue;
      if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') {
        url.searchParams.append(key, String(value));
      } else {
        for (const item of value) url.searchParams.append(key, item);
      }
    }
    return url;
  }

  /** Headers every request carries: `Authorization` when a key is set, `X-Burrow-Tenant` when a tenant is. */
  authHeaders(): Record<string, string> {
    const { apiKey, tenantId } = this.connection;
    return {
      ...(apiKey === undefined ? {} : { authorization: `Bearer ${apiKey}` }),
      ...(tenantId === undefined ? {} : { 'x-burrow-tenant': tenantId }),
    };
  }

  /** Sends a request and returns the response when it is 2xx; throws the mapped {@link BurrowError} otherwise. */
  async send(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
    const headers: Record<string, string> = { ...this.authHeaders(), ...options.headers };
    let body: string | Uint8Array | ReadableStream<Uint8Array> | undefined;
    if (options.json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(options.json);
    } else if (options.body !== undefined) {
      headers['content-type'] = options.contentType ?? 'application/octet-stream';
      if (isNodeFetch(this.connection.fetch)) {
        // Node's fetch (undici) does not wait for the socket to drain while it sends a streamed body: a 1 GiB upload
        // grew the client by 1 GiB. node:http with pipeline keeps to one socket buffer. Buffers go the same way:
        // there the connection of a refused upload is closed, never reused (see nodeHttpRequest).
        const url = this.url(path, options.query);
        let response: Response;
        try {
          response = await sendStreamWithNodeHttp(method, url, headers, options.body, options.signal);
        } catch (err) {
          throw this.networkError(err, options.signal);
        }
        if (!response.ok) throw await errorFromResponse(response);
        return response;
      }
      body = options.body instanceof Uint8Array ? options.body : toWebStream(options.body);
    }
    let response: Response;
    try {
      response = await this.connection.fetch(this.url(path, options.query), {
        method,
        headers,
        ...(body === undefined ? {} : { body }),
        // A streamed request body needs half duplex in fetch.
        ...(body !== undefined && typeof body !== 'string' && !(body instanceof Uint8Array) ? { duplex: 'half' } : {}),
        ...(options.signal === undefined ? {} : { signal: options.signal }),
      });
    } catch (err) {
      throw this.networkError(err, options.signal);
    }
    if (!response.ok) throw await errorFromResponse(response);
    return response;
  }

  /**
   * Node.js only: sends a request without a body through node:http and returns the 2xx response as a Node stream
   * (no web-stream conversion: about half the client CPU of `fetch` for large downloads). Throws the mapped
   * {@link BurrowError} otherwise. `undefined` when the client uses a custom `fetch` or does not run on Node.
   */
  async sendNode(
    method: string,
    path: string,
    options: Pick<RequestOptions, 'query' | 'headers' | 'signal'> = {},
  ): Promise<import('node:http').IncomingMessage | undefined> {
    if (!isNodeFetch(this.connection.fetch)) return undefined;
    const headers: Record<string, string> = { ...this.authHeaders(), ...options.headers };
    let res: import('node:http').IncomingMessage;
    try {
      res = await nodeHttpRequest(method, this.url(path, options.query), headers, undefined, options.signal);
    } catch (err) {
      throw this.networkError(err, options.signal);
    }
    const status = res.statusCode ?? 0;
    if (status >= 200 && status < 300) return res;
    const chunks: Buffer[] = [];
    for await (const chunk of res) chunks.push(chunk as Buffer);
    const requestId = res.headers['x-request-id'];
    return Promise.reject(
      errorFromBody(Buffer.concat(chunks).toString('utf8'), status, typeof requestId === 'string' ? requestId : ''),
    );
  }

  /**
   * Node.js only, over plain `http:` with the default `fetch`: GET `path` with its body written straight into
   * `localPath` (see {@link getIntoFile}: two reused receive buffers instead of node:http's 64 KiB reads).
   * @returns the bytes written, or `undefined` when this way does not apply (the caller sends the request another way)
   * @throws the mapped {@link BurrowError} for an error answer, {@link ConnectionError} or {@link AbortedError}; a local
   * file error as thrown by `node:fs`
   */
  async getIntoFile(
    path: string,
    localPath: string,
    options: Pick<RequestOptions, 'query' | 'signal'> & { onProgress?: ((bytes: number) => void) | undefined } = {},
  ): Promise<{ sizeBytes: number } | undefined> {
    if (!isNodeFetch(this.connection.fetch)) return undefined;
    const url = this.url(path, options.query);
    if (url.protocol !== 'http:') return undefined;
    let outcome: FileDownloadOutcome;
    try {
      outcome = await getIntoFile(url, this.authHeaders(), localPath, options);
    } catch (err) {
      if (err instanceof LocalFileFailure) throw err.cause;
      throw this.networkError(err, options.signal);
    }
    if (outcome.kind === 'unsupported') return undefined;
    if (outcome.kind === 'done') return { sizeBytes: outcome.sizeBytes };
    throw errorFromBody(outcome.text, outcome.status, outcome.requestId);
  }

  /** Sends a request and parses the JSON response with a contract schema. */
  async json<T>(parser: WireParser<T>, method: string, path: string, options: RequestOptions = {}): Promise<T> {
    if (options.body === undefined && isNodeFetch(this.connection.fetch)) {
      const answer = await this.sendBuffered(method, path, options);
      return parseBody(parser, parseJsonText(answer.text, answer.status), answer);
    }
    const response = await this.send(method, path, options);
    return parseBody(parser, await readJson(response), response);
  }

  /** Sends a request whose success response has no body (204). */
  async empty(method: string, path: string, options: RequestOptions = {}): Promise<void> {
    if (options.body === undefined && isNodeFetch(this.connection.fetch)) {
      await this.sendBuffered(method, path, options);
      return;
    }
    const response = await this.send(method, path, options);
    await response.body?.cancel();
  }

  /**
   * Node.js only: a request with a JSON body (or none) through node:http, its whole answer read. `fetch` (undici)
   * cost about 3× the client CPU per call (5.3 against 1.6 ms measured on a loaded 2-core host), which doubled the
   * round trip of a short exec. A request that fails with ECONNRESET on a kept-alive socket before any answer (the
   * server closed the idle socket as it was reused) is sent once more on a new socket.
   * @throws the mapped {@link BurrowError} for a non-2xx answer, {@link ConnectionError} or {@link AbortedError}
   */
  private async sendBuffered(
    method: string,
    path: string,
    options: RequestOptions,
  ): Promise<{ status: number; text: string }> {
    const headers: Record<string, string> = { ...this.authHeaders(), ...options.headers };
    let body: string | undefined;
    if (options.json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(options.json);
    }
    const url = this.url(path, options.query);
    for (let attempt = 1; ; attempt++) {
      let answer: BufferedAnswer;
      try {
        answer = await bufferedNodeRequest(method, url, headers, body, options.signal);
      } catch (err) {
        if (attempt === 1 && err instanceof StaleSocketError && !options.signal?.aborted) continue;
        throw this.networkError(err instanceof StaleSocketError ? err.cause : err, options.signal);
      }
      if (answer.status >= 200 && answer.status < 300) return answer;
      throw errorFromBody(answer.text, answer.status, answer.requestId);
    }
  }

  /** Whether requests go through node:http (Node.js with the default `fetch`): what the HTTP exec stream needs. */
  usesNodeHttp(): boolean {
    return isNodeFetch(this.connection.fetch);
  }

  /** Wraps a thrown fetch failure: an abort becomes {@link AbortedError}, anything else {@link ConnectionError}. */
  networkError(err: unknown, signal?: AbortSignal): BurrowError {
    if (err instanceof BurrowError) return err;
    if (signal?.aborted) {
      return new AbortedError('the operation was aborted', { code: ClientErrorCode.aborted, cause: signal.reason });
    }
    return connectionError(this.connection.apiUrl, err);
  }
}

/** A whole HTTP answer read by {@link bufferedNodeRequest}. */
interface BufferedAnswer {
  status: number;
  text: string;
  requestId: string;
}

/** A kept-alive socket was reset before the request got any answer: nothing was processed, it may be resent. */
class StaleSocketError extends Error {
  constructor(override readonly cause: unknown) {
    super('a kept-alive socket was closed by the server');
  }
}

/** node:http and node:https, each loaded on its first request: node:https brings TLS and crypto (~20 ms of CPU). */
const nodeHttpModules: {
  'http:'?: Promise<typeof import('node:http')>;
  'https:'?: Promise<typeof import('node:https')>;
} = {};

function nodeHttpModule(protocol: string): Promise<Pick<typeof import('node:http'), 'request'>> {
  if (protocol === 'https:') {
    nodeHttpModules['https:'] ??= import('node:https');
    return nodeHttpModules['https:'];
  }
  nodeHttpModules['http:'] ??= import('node:http');
  return nodeHttpModules['http:'];
}

/** One request through node:http(s) (the default agents keep sockets alive), its answer read whole as UTF-8. */
async function bufferedNodeRequest(
  method: string,
  url: URL,
  headers: Record<string, string>,
  body: string | undefined,
  signal: AbortSignal | undefined,
): Promise<BufferedAnswer> {
  const transport = await nodeHttpModule(url.protocol);
  return new Promise((resolve, reject) => {
    const request = transport.request(url, {
      method,
      headers: body === undefined ? headers : { ...headers, 'content-length': String(Buffer.byteLength(body)) },
      ...(signal === undefined ? {} : { signal }),
    });
    let answered = false;
    request.on('response', (res) => {
      answered = true;
      if (body !== undefined) endUnlessSent(request, res);
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('error', reject);
      res.on('end', () => {
        const requestId = res.headers['x-request-id'];
        resolve({
          status: res.statusCode ?? 0,
          text: Buffer.concat(chunks).toString('utf8'),
          requestId: typeof requestId === 'string' ? requestId : '',
        });
      });
    });
    request.on('error', (err: NodeJS.ErrnoException) => {
      reject(!answered && request.reusedSocket && err.code === 'ECONNRESET' ? new StaleSocketError(err) : err);
    });
    request.end(body);
  });
}

/** Whether `fetch` is Node's global fetch (undici), which accepts async iterables as request bodies. */
function isNodeFetch(fetch: typeof globalThis.fetch): boolean {
  return fetch === globalThis.fetch && typeof process !== 'undefined' && typeof process.versions?.node === 'string';
}

/** Send a body with node:http (a stream with backpressure), answering a web {@link Response}. */
async function sendStreamWithNodeHttp(
  method: string,
  url: URL,
  headers: Record<string, string>,
  body: Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
  signal: AbortSignal | undefined,
): Promise<Response> {
  const { Readable } = await import('node:stream');
  const length =
    body instanceof Uint8Array ? { 'content-length': String(body.byteLength) } : { 'transfer-encoding': 'chunked' };
  const res = await nodeHttpRequest(method, url, { ...headers, ...length }, body, signal);
  const responseHeaders = new Headers();
  for (const [key, value] of Object.entries(res.headers)) {
    if (typeof value === 'string') responseHeaders.set(key, value);
    else if (Array.isArray(value)) for (const v of value) responseHeaders.append(key, v);
  }
  const status = res.statusCode ?? 0;
  const stream = status === 204 ? null : (Readable.toWeb(res) as unknown as ReadableStream<Uint8Array>);
  if (status === 204) res.resume();
  return new Response(stream, { status, headers: responseHeaders });
}

/**
 * One request with node:http: the body (if any) is piped with backpressure; a Node `Readable` is piped as it is (no
 * re-wrapping: one hop per chunk). Resolves with the response as soon as its head arrives. The connection of a
 * request whose body the server may not have read ({@link keepsConnection}) is closed after its response.
 */
async function nodeHttpRequest(
  method: string,
  url: URL,
  headers: Record<string, string>,
  body: Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array> | undefined,
  signal: AbortSignal | undefined,
): Promise<import('node:http').IncomingMessage> {
  const http = await import(url.protocol === 'https:' ? 'node:https' : 'node:http');
  const { Readable } = await import('node:stream');
  const { pipeline } = await import('node:stream/promises');
  return new Promise((resolve, reject) => {
    const request = http.request(url, { method, headers, signal });
    request.on('response', (res: import('node:http').IncomingMessage) => {
      if (body !== undefined) endUnlessSent(request, res);
      resolve(res);
    });
    request.on('error', reject);
    if (body === undefined) {
      request.end();
      return;
    }
    if (body instanceof Uint8Array) {
      request.end(body);
      return;
    }
    const source =
      body instanceof Readable
        ? body
        : body instanceof ReadableStream
          ? Readable.fromWeb(body as import('node:stream/web').ReadableStream<Uint8Array>)
          : Readable.from(body);
    pipeline(source, request).catch(reject);
  });
}

/**
 * Whether the connection of a request with a body may serve another request after `res`: only when the server
 * answered 2xx (it read the whole body) and the request was all sent. Any other answer may have come before the
 * server read the body, whose unread rest would then precede the next request on that connection: the server takes
 * it for the next request's start, and that call waits until the server's idle timeout resets the connection.
 */
function keepsConnection(
  request: import('node:http').ClientRequest,
  res: import('node:http').IncomingMessage,
): boolean {
  const status = res.statusCode ?? 0;
  return status >= 200 && status < 300 && request.writableFinished;
}

/** Closes the connection of `request` once `res` is read, unless {@link keepsConnection}; stops sending the body. */
function endUnlessSent(request: import('node:http').ClientRequest, res: import('node:http').IncomingMessage): void {
  if (keepsConnection(request, res)) return;
  request.shouldKeepAlive = false;
  res.once('end', () => request.destroy());
}

/** An async iterable of bytes as a web stream (pulled as the request is sent: backpressure holds). */
function toWebStream(source: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>): ReadableStream<Uint8Array> {
  if (source instanceof ReadableStream) return source;
  const iterator = source[Symbol.asyncIterator]();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const { value, done } = await iterator.next();
      if (done) controller.close();
      else controller.enqueue(value);
    },
    async cancel(reason) {
      await iterator.return?.(reason);
    },
  });
}

/** Error codes of a connection that was open and then went away under a request (not one that never opened). */
const CLOSED_MID_REQUEST_CODES = new Set(['ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET', 'UND_ERR_CLOSED']);

/**
 * A {@link ConnectionError} for a network failure: a server that closed the connection under a request (it stopped
 * or restarted mid-call), or one that cannot be reached at all (with a hint about `BURROW_URL`).
 */
export function connectionError(apiUrl: string, err: unknown): ConnectionError {
  const reason = describeNetworkError(err);
  if (closedMidRequest(err)) {
    return new ConnectionError(`the Burrow server at ${apiUrl} closed the connection mid-request: ${reason}`, {
      code: ClientErrorCode.connectionFailed,
      hint: 'the server may have stopped or restarted: check that `burrow server` runs (and its log), then retry; a call that changes something may or may not have taken effect',
      cause: err,
    });
  }
  return new ConnectionError(`could not reach the Burrow server at ${apiUrl}: ${reason}`, {
    code: ClientErrorCode.connectionFailed,
    hint: 'check BURROW_URL (or the apiUrl / --url option) and that `burrow server` is running',
    cause: err,
  });
}

function closedMidRequest(err: unknown): boolean {
  for (let at: unknown = err, depth = 0; at instanceof Error && depth < 3; at = at.cause, depth++) {
    const code = (at as NodeJS.ErrnoException).code;
    if (code !== undefined && CLOSED_MID_REQUEST_CODES.has(code)) return true;
  }
  return false;
}

function describeNetworkError(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause: unknown = err.cause;
  if (cause instanceof Error) {
    const code = (cause as NodeJS.ErrnoException).code;
    return code === undefined ? cause.message : `${code} (${cause.message})`;
  }
  return err.message;
}

/** Reads a non-2xx response into the matching {@link BurrowError}. */
export async function errorFromResponse(response: Response): Promise<BurrowError> {
  const text = await response.text().catch(() => '');
  return errorFromBody(text, response.status, response.headers.get('x-request-id') ?? '');
}

/** Maps an error body (an envelope, or anything else) and its status to a {@link BurrowError}. */
export function errorFromBody(text: string, status: number, requestId = ''): BurrowError {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  const envelope = ErrorEnvelopeParser.parse(parsed);
  if (envelope !== INVALID) return errorFromWire(envelope.error, status);
  const loose = looseError(parsed);
  if (loose !== undefined) return errorFromWire({ requestId, ...loose }, status);
  return new ProtocolError(`the server answered HTTP ${status} without an error envelope: ${text.slice(0, 200)}`, {
    code: ClientErrorCode.protocolError,
    status,
    requestId,
    hint: 'check that the URL points at a Burrow server of the same version as this SDK',
  });
}

function looseError(parsed: unknown): { code: string; message: string; hint?: string } | undefined {
  if (typeof parsed !== 'object' || parsed === null || !('error' in parsed)) return undefined;
  const error: unknown = parsed.error;
  if (typeof error !== 'object' || error === null) return undefined;
  const { code, message, hint } = error as Record<string, unknown>;
  if (typeof code !== 'string' || typeof message !== 'string') return undefined;
  return typeof hint === 'string' ? { code, message, hint } : { code, message };
}

async function readJson(response: Response): Promise<unknown> {
  return parseJsonText(await response.text(), response.status);
}

function parseJsonText(text: string, status: number): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new ProtocolError(`the server answered with invalid JSON: ${text.slice(0, 200)}`, {
      code: ClientErrorCode.protocolError,
      status,
      cause: err,
    });
  }
}

/**
 * Validates a response body with its contract parser; a mismatch is a {@link ProtocolError}. Only a mismatch loads
 * zod and the contract's schemas, for the message.
 */
export async function parseBody<T>(
  parser: WireParser<T>,
  body: unknown,
  response?: { readonly status: number },
): Promise<T> {
  const value = parser.parse(body);
  if (value !== INVALID) return value;
  const error = await schemaError(parser, body);
  throw new ProtocolError(`the server's response does not match the contract: ${error.message}`, {
    code: ClientErrorCode.protocolError,
    status: response?.status ?? 0,
    hint: 'the SDK and the server are probably different versions',
    cause: error,
  });
}

/** Parses a stream event with its contract parser; a mismatch throws the schema's `ZodError`, as `schema.parse`. */
export async function parseStrict<T>(parser: WireParser<T>, body: unknown): Promise<T> {
  const value = parser.parse(body);
  if (value !== INVALID) return value;
  throw await schemaError(parser, body);
}

/** The `ZodError` the parser's schema reports for a body its parser rejected. */
async function schemaError(parser: WireParser<unknown>, body: unknown): Promise<Error> {
  const contract: Record<string, unknown> = await import('@burrow/contract');
  const schema = contract[parser.schemaName] as { safeParse(input: unknown): { error?: Error } };
  return schema.safeParse(body).error ?? new Error(`${parser.schemaName} accepts what its parser rejects`);
}
