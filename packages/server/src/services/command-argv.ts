/** The argv of a command: a string runs through `/bin/sh -c`. */
export function toArgv(cmd: string | string[]): string[] {
  return typeof cmd === 'string' ? ['/bin/sh', '-c', cmd] : cmd;
}
