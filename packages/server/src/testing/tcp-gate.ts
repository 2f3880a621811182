import { createConnection, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP relay on 127.0.0.1 in front of a real server, which a test can shut (listener closed, connections cut:
 * the server looks down, as a stopped S3 does) and open again on the same port. Not a fake: bytes pass unchanged.
 */
export class TcpGate {
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
  port = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  /** Listen (on the port of the first open when reopened). @returns the URL `http://127.0.0.1:<port>` */
  async open(): Promise<string> {
    const server = createServer((client) => {
      const upstream = createConnection({ host: this.targetHost, port: this.targetPort });
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream);
      upstream.pipe(client);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    const address = server.address();
    if (address !== null && typeof address === 'object') this.port = address.port;
    this.server = server;
    return `http://127.0.0.1:${this.port}`;
  }

  /** Stop listening and cut every open connection. */
  async shut(): Promise<void> {
    const server = this.server;
    this.server = null;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    if (server !== null) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
