import { posix } from 'node:path';

/** A sandbox path from an E2B path: relative paths resolve against `home`. */
export function resolveE2bPath(path: string, home: string): string {
  return posix.normalize(path.startsWith('/') ? path : `${home}/${path}`);
}
