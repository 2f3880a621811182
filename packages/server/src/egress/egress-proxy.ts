import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { Duplex } from 'node:stream';
import tls from 'node:tls';
import { normalizeDnsName } from '@burrow/contract/network-rules';
import type { Logger } from 'pino';
import type { LazyEgressCa } from './egress-ca.js';
import { type AppliedSecret, responseHeaders, substituteSecrets } from './secret-substitution.js';
import { MAX_CLIENT_HELLO_BYTES, readClientHello } from './tls-client-hello.js';

/** Options of {@link startEgressProxy}. */
export interface EgressProxyOptions {
  /** Host address to listen on (the network's host gateway, which routers redirect to). */
  listenAddress: string;
  /** TCP port; 0 picks a free one. */
  port: number;
  ca: LazyEgressCa;
  /** The sandbox behind a connection's source address (its uplink address), or undefined for a stranger. */
  sandboxFor(sourceAddress: string): Promise<string | undefined>;
  /** The secrets to apply to a request of `sandboxId` to `name`, values as of now. */
  secretsFor(sandboxId: string, name: string): Promise<AppliedSecret[]>;
  /** CA certificates (PEM) the real hosts' certificates are verified against. @default Node's bundled roots */
  upstreamCa?: readonly string[] | undefined;
  logger: Logger;
  /** Time to receive a connection's first bytes and to connect upstream, ms. @default 10_000 */
  timeoutMs?: number | undefined;
}

/** A running egress proxy. */
export interface EgressProxy {
  address: string;
  port: number;
  /**
   * Remember that `sandboxId` resolved `name` to `addresses` (IPv4) and that its connections to them come here: the
   * proxy sends a request for `name` to these addresses. Entries expire after `ttlSeconds`.
   */
  record(sandboxId: string, name: string, addresses: readonly string[], ttlSeconds: number): void;
  /** Stop accepting and end open connections. Idempotent. */
  close(): Promise<void>;
}

interface Route {
  addresses: string[];
  expiresAtMs: number;
}

interface ConnectionContext {
  sandboxId: string;
  /** The SNI name of an intercepted TLS connection; null for plain HTTP (the Host header names it). */
  tlsName: string | null;
}

/**
 * Start the proxy that puts secrets into a sandbox's requests to their hosts (docs/network.md "Secrets at egress").
 * Routers redirect a sandbox's TCP 80/443 connections to addresses of names bound to its secrets here. Per
 * connection: a TLS ClientHello naming a recorded name is terminated with a leaf of the installation's CA for that
 * name, other TLS passes through untouched to the address the sandbox resolved; plain HTTP is read as HTTP. Each
 * request is forwarded to a recorded address of its name (HTTPS verified against `upstreamCa` for that name) with
 * the secrets bound to the name substituted; a name no secret is bound to gets the request as sent.
 * @throws Error when the address cannot be bound
 */
export async function startEgressProxy(options: EgressProxyOptions): Promise<EgressProxy> {
  const logger = options.logger.child({ component: 'egress-proxy' });
  const timeoutMs = options.timeoutMs ?? 10_000;
  const routes = new Map<string, Map<string, Route>>();
  const contexts = new WeakMap<object, ConnectionContext>();
  const open = new Set<net.Socket>();
  const upstreamCa = options.upstreamCa === undefined ? undefined : [...tls.rootCertificates, ...options.upstreamCa];
  const secureContexts = new Map<string, tls.SecureContext>();

  const routeOf = (sandboxId: string, name: string | null): Route | undefined => {
    const byName = routes.get(sandboxId);
    if (byName === undefined) return undefined;
    const now = Date.now();
    if (name !== null) {
      const route = byName.get(name);
      return route !== undefined && route.expiresAtMs > now ? route : undefined;
    }
    // No name (a passed-through TLS connection): the newest live route of the sandbox.
    let newest: Route | undefined;
    for (const route of byName.values()) {
      if (route.expiresAtMs > now && (newest === undefined || route.expiresAtMs > newest.expiresAtMs)) newest = route;
    }
    return newest;
  };

  const handler = (request: http.IncomingMessage, response: http.ServerResponse): void => {
    forward(request, response).catch((error: unknown) => {
      logger.warn({ err: error }, 'egress proxy request failed');
      if (!response.headersSent) response.writeHead(502, { 'content-type': 'text/plain' });
      response.end('burrow egress proxy: the request could not be forwarded\n');
    });
  };
  const forward = async (request: http.IncomingMessage, response: http.ServerResponse): Promise<void> => {
    const context = contexts.get(request.socket);
    if (context === undefined) throw new Error('a request on a connection the proxy did not accept');
    const secure = context.tlsName !== null;
    const hostHeader = (request.headers.host ?? '').replace(/:\d+$/, '');
    const name = context.tlsName ?? normalizeDnsName(hostHeader);
    const route = routeOf(context.sandboxId, name);
    // A plain HTTP request naming no recorded name goes, as sent, to the sandbox's newest intercepted address.
    const address = (route ?? (secure ? undefined : routeOf(context.sandboxId, null)))?.addresses[0];
    if (address === undefined) {
      response.writeHead(502, { 'content-type': 'text/plain' });
      response.end(`burrow egress proxy: no address resolved for ${hostHeader || 'this request'}; resolve it again\n`);
      return;
    }
    // Secrets only go to the addresses resolved for the very name they are bound to.
    const secrets = route === undefined || name === null ? [] : await options.secretsFor(context.sandboxId, name);
    const { target, headers } = substituteSecrets(request.url ?? '/', request.rawHeaders, secrets);
    const headerObject: Record<string, string | string[]> = {};
    for (const [key, value] of headers) {
      const known = headerObject[key];
      headerObject[key] = known === undefined ? value : [...(Array.isArray(known) ? known : [known]), value];
    }
    const requestOptions: https.RequestOptions = {
      host: address,
      port: secure ? 443 : 80,
      method: request.method,
      path: target,
      headers: headerObject,
      setHost: false,
      agent: false,
      timeout: timeoutMs,
      ...(secure && name !== null ? { servername: name, ...(upstreamCa === undefined ? {} : { ca: upstreamCa }) } : {}),
    };
    await new Promise<void>((resolve, reject) => {
      const upstream = (secure ? https : http).request(requestOptions, (answer) => {
        response.writeHead(answer.statusCode ?? 502, answer.statusMessage, responseHeaders(answer.rawHeaders));
        answer.pipe(response);
        answer.on('end', resolve);
        answer.on('error', reject);
      });
      upstream.on('timeout', () => upstream.destroy(new Error(`${name} did not answer in ${timeoutMs} ms`)));
      upstream.on('error', reject);
      request.pipe(upstream);
    });
  };

  const httpServer = http.createServer(handler);
  httpServer.on('clientError', (_error, socket) => socket.destroy());

  const secureContextFor = async (name: string): Promise<tls.SecureContext> => {
    let context = secureContexts.get(name);
    if (context === undefined) {
      const leaf = (await options.ca.get()).leafFor(name);
      context = tls.createSecureContext({ cert: leaf.certPem, key: leaf.keyPem });
      if (secureContexts.size > 10_000) secureContexts.clear();
      secureContexts.set(name, context);
    }
    return context;
  };

  const accept = async (socket: net.Socket): Promise<void> => {
    const head = await firstBytes(socket, timeoutMs);
    const sandboxId = await options.sandboxFor(socket.remoteAddress?.replace(/^::ffff:/, '') ?? '');
    if (sandboxId === undefined || head === null) {
      socket.destroy();
      return;
    }
    const hello = readClientHello(head);
    const replay = replaying(socket, head);
    if (hello.kind === 'tls') {
      const name = hello.serverName === null ? null : normalizeDnsName(hello.serverName);
      const route = name === null ? undefined : routeOf(sandboxId, name);
      if (name === null || route === undefined) {
        passThrough(socket, head, routeOf(sandboxId, null)?.addresses[0], timeoutMs);
        return;
      }
      const secured = new tls.TLSSocket(replay, {
        isServer: true,
        secureContext: await secureContextFor(name),
        ALPNProtocols: ['http/1.1'],
      });
      secured.on('error', () => socket.destroy());
      contexts.set(secured, { sandboxId, tlsName: name });
      httpServer.emit('connection', secured);
      return;
    }
    contexts.set(replay, { sandboxId, tlsName: null });
    httpServer.emit('connection', replay);
  };

  const server = net.createServer((socket) => {
    open.add(socket);
    socket.on('close', () => open.delete(socket));
    socket.on('error', () => socket.destroy());
    accept(socket).catch((error: unknown) => {
      logger.warn({ err: error }, 'egress proxy connection failed');
      socket.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.listenAddress, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const bound = server.address() as net.AddressInfo;
  logger.info({ address: bound.address, port: bound.port }, 'egress proxy listening');
  let closing: Promise<void> | undefined;
  return {
    address: bound.address,
    port: bound.port,
    record(sandboxId, name, addresses, ttlSeconds) {
      let byName = routes.get(sandboxId);
      if (byName === undefined) {
        byName = new Map();
        routes.set(sandboxId, byName);
      }
      const now = Date.now();
      for (const [known, route] of byName) if (route.expiresAtMs <= now) byName.delete(known);
      byName.set(name, { addresses: [...addresses], expiresAtMs: now + ttlSeconds * 1000 });
    },
    close() {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const socket of open) socket.destroy();
      });
      return closing;
    },
  };
}

/** The connection's first bytes: until a TLS record is whole, or any bytes of something else; null on timeout/close. */
function firstBytes(socket: net.Socket, timeoutMs: number): Promise<Buffer | null> {
  return new Promise((resolve) => {
    let head = Buffer.alloc(0);
    const done = (value: Buffer | null) => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('close', onClose);
      socket.pause();
      resolve(value);
    };
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      if (readClientHello(head).kind !== 'incomplete' || head.length >= MAX_CLIENT_HELLO_BYTES) done(head);
    };
    const onClose = () => done(null);
    const timer = setTimeout(() => done(null), timeoutMs);
    socket.on('data', onData);
    socket.on('close', onClose);
  });
}

/** A stream that reads `head`, then what `socket` receives; writes go to `socket`. */
function replaying(socket: net.Socket, head: Buffer): Duplex {
  const duplex = new Duplex({
    read() {
      socket.resume();
    },
    write(chunk, _encoding, callback) {
      socket.write(chunk, callback);
    },
    final(callback) {
      socket.end(callback);
    },
    destroy(error, callback) {
      socket.destroy();
      callback(error);
    },
  });
  duplex.push(head);
  socket.on('data', (chunk: Buffer) => {
    if (!duplex.push(chunk)) socket.pause();
  });
  socket.on('end', () => duplex.push(null));
  socket.on('close', () => duplex.destroy());
  return duplex;
}

/** Relay a TLS connection not terminated here to `address`:443 unchanged (nothing to substitute for its name). */
function passThrough(socket: net.Socket, head: Buffer, address: string | undefined, timeoutMs: number): void {
  if (address === undefined) {
    socket.destroy();
    return;
  }
  const upstream = net.connect({ host: address, port: 443, timeout: timeoutMs });
  upstream.once('connect', () => upstream.setTimeout(0));
  upstream.on('timeout', () => upstream.destroy());
  upstream.on('error', () => socket.destroy());
  upstream.on('close', () => socket.destroy());
  socket.on('close', () => upstream.destroy());
  upstream.write(head);
  socket.pipe(upstream);
  upstream.pipe(socket);
  socket.resume();
}
