import { AsyncLocalStorage } from 'node:async_hooks';

/** Who causes the transitions of one async call chain, and why. */
export interface ActorScope {
  /** `key_…` for API calls, `system:reconciler` for policy and repair steps. */
  actor: string;
  /** Machine-readable cause for events recorded in this scope, for example `IdleTimeout`. @default derived */
  reason?: string;
}

/** The actor of the reconciler and other background steps. */
export const SYSTEM_RECONCILER = 'system:reconciler';

/**
 * Carries the {@link ActorScope} of a request or a reconciler step through its async calls, so that events
 * recorded deep in the store name who and why without threading them through every service. One instance is
 * built in main.ts and shared by the app and the event recorder.
 */
export class ActorContext {
  private readonly storage = new AsyncLocalStorage<ActorScope>();

  /** Run `fn` with `scope` as the current actor. */
  run<T>(scope: ActorScope, fn: () => T): T {
    return this.storage.run(scope, fn);
  }

  /** The current scope, or null outside any. */
  current(): ActorScope | null {
    return this.storage.getStore() ?? null;
  }
}
