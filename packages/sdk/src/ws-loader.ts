import { createRequire } from 'node:module';
import type WebSocket from 'ws';

let loaded: typeof WebSocket | undefined;

/**
 * The `ws` WebSocket class, loaded on the first stream so that importing the SDK does not load it. Through
 * `require`: on Node 20 the package's ESM wrapper costs about 0.1 s more CPU (each CommonJS file it imports is
 * scanned for its exports).
 */
export function webSocketClass(): typeof WebSocket {
  loaded ??= createRequire(import.meta.url)('ws') as typeof WebSocket;
  return loaded;
}
