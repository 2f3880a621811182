/**
 * One async mutex per key (a sandbox id): operations on the same key run one after another, in arrival
 * order; operations on different keys run concurrently. Entries are dropped when no one waits.
 */
export class KeyedMutex {
  private readonly tails = new Map<string, Promise<void>>();

  /**
   * Run `fn` once every earlier holder of `key` has finished.
   * @returns what `fn` returns
   * @throws whatever `fn` throws (the lock is released either way)
   */
  async run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => {
      release = resolve;
    });
    const tail = previous.then(() => mine);
    this.tails.set(key, tail);
    await previous;
    try {
      return await fn();
    } finally {
      release();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }

  /** Whether some operation holds or waits for `key`. */
  isBusy(key: string): boolean {
    return this.tails.has(key);
  }
}
