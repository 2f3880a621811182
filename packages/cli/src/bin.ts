#!/usr/bin/env node
import { main } from './main.js';

const flush = (stream: NodeJS.WriteStream) => new Promise<void>((resolve) => stream.write('', () => resolve()));

const code = await main(process.argv);
// Exit as soon as the output is flushed: idle keep-alive sockets would otherwise hold the process ~200 ms longer.
await Promise.all([flush(process.stdout), flush(process.stderr)]);
process.exit(code);
