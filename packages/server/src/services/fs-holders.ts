import type { RuntimeDriver } from '@burrow/runtime';

/** Releases what one holder keeps open on a sandbox's file system; resolves once its handles are closed. */
export type FsRelease = () => Promise<void>;

/**
 * Long-lived holders of handles inside sandboxes' file systems (file watches), by sandbox id. A held directory
 * handle keeps the sandbox's overlay busy, so the runtime could not unmount it: a pause failed after its
 * checkpoint (the sentry already gone) and a delete answered 500 until the watch noticed on its own.
 * The runtime verbs that unmount first release every holder of the sandbox ({@link releasingDriver}).
 */
export class FsHolders {
  private readonly byId = new Map<string, Set<FsRelease>>();

  /**
   * Register `release` for sandbox `sandboxId`.
   * @returns a function that unregisters it (call it when the holder closes on its own)
   */
  hold(sandboxId: string, release: FsRelease): () => void {
    let set = this.byId.get(sandboxId);
    if (set === undefined) {
      set = new Set();
      this.byId.set(sandboxId, set);
    }
    set.add(release);
    return () => {
      set.delete(release);
      if (set.size === 0 && this.byId.get(sandboxId) === set) this.byId.delete(sandboxId);
    };
  }

  /** Release every holder of `sandboxId` and wait until their handles are closed (errors are ignored). */
  async releaseAll(sandboxId: string): Promise<void> {
    const set = this.byId.get(sandboxId);
    if (set === undefined) return;
    this.byId.delete(sandboxId);
    await Promise.all([...set].map((release) => release().catch(() => undefined)));
  }

  /** How many holders `sandboxId` has (for tests and metrics). */
  count(sandboxId: string): number {
    return this.byId.get(sandboxId)?.size ?? 0;
  }
}

/** Driver verbs that unmount a sandbox's file system; their first argument is the sandbox id. */
const UNMOUNTING: ReadonlySet<PropertyKey> = new Set(['pause', 'stop', 'delete']);

/**
 * `driver` with {@link FsHolders.releaseAll} run before every verb that unmounts the sandbox's file system
 * (pause, stop, delete; reset deletes first). Everything else passes through unchanged.
 */
export function releasingDriver(driver: RuntimeDriver, holders: FsHolders): RuntimeDriver {
  return new Proxy(driver, {
    get(target, prop) {
      const value: unknown = Reflect.get(target, prop);
      if (typeof value !== 'function') return value;
      if (!UNMOUNTING.has(prop)) return value.bind(target);
      return async (sandboxId: string, ...rest: unknown[]) => {
        await holders.releaseAll(sandboxId);
        return (value as (...args: unknown[]) => unknown).call(target, sandboxId, ...rest);
      };
    },
  });
}
