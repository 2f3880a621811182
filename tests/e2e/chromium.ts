/**
 * Debian's chromium driven by playwright-core for the console's browser tests (installed by scripts/install-deps.sh;
 * playwright's own browser download does not work offline). Flags keep a headless run quiet and offline.
 */
import { execFileSync } from 'node:child_process';
import { type Browser, chromium } from 'playwright-core';

/** Launch flags: no sandbox (tests run as root), no GPU, no background traffic to Google's services. */
export const CHROMIUM_FLAGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];

/** Path of the chromium binary, or null when it is not installed. */
export function chromiumPath(): string | null {
  try {
    return execFileSync('sh', ['-c', 'command -v chromium'], { encoding: 'utf8' }).trim() || null;
  } catch {
    return null;
  }
}

/**
 * Start headless chromium.
 * @throws Error naming the package to install when chromium is missing
 */
export async function launchChromium(): Promise<Browser> {
  const executablePath = chromiumPath();
  if (executablePath === null)
    throw new Error('chromium is not installed: run scripts/install-deps.sh (apt-get install chromium)');
  return chromium.launch({ executablePath, headless: true, args: CHROMIUM_FLAGS });
}
