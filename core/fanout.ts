/**
 * Listeners of the service (accepted events, run changes, commit outcomes): each runs
 * synchronously and must not block, and a listener's failure never affects ingestion.
 *
 * @example Usage
 * ```ts
 * import { Fanout } from "./fanout.ts";
 * import assert from "node:assert/strict";
 *
 * const seen: number[] = [];
 * const fanout = new Fanout<number>();
 * const unsubscribe = fanout.add((n) => seen.push(n));
 * fanout.add(() => {
 *   throw new Error("ignored");
 * });
 * fanout.emit(1);
 * unsubscribe();
 * fanout.emit(2);
 * assert.deepEqual(seen, [1]);
 * ```
 *
 * @module
 */

/**
 * A set of listeners that each receive every message.
 *
 * @example Usage
 * ```ts
 * import { Fanout } from "./fanout.ts";
 * const fanout = new Fanout<string>();
 * fanout.add((message) => console.log(message));
 * fanout.emit("hello");
 * ```
 */
export class Fanout<T> {
  #listeners = new Set<(message: T) => void>();

  /**
   * Registers a listener.
   *
   * @param listener Called with each message.
   * @returns A function that unsubscribes.
   */
  add(listener: (message: T) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Calls every listener with a message; an exception in one is ignored.
   *
   * @param message The message.
   */
  emit(message: T): void {
    for (const listener of this.#listeners) {
      try {
        listener(message);
      } catch {
        // A listener's failure must never affect ingestion.
      }
    }
  }

  /** Unregisters every listener. */
  clear(): void {
    this.#listeners.clear();
  }
}
