/**
 * The service's one queue: every event and every run change, in arrival order. Consecutive
 * events are handed to the commit function together, so they share one write per file; a run
 * change runs alone, between the events before it and those after it.
 *
 * @module
 */

/** A function that runs alone; items are queued as they are, without a wrapper. */
class ControlOp {
  constructor(
    readonly run: () => Promise<unknown>,
    readonly resolve: (value: unknown) => void,
    readonly reject: (err: unknown) => void,
  ) {}
}

/**
 * Calls `fn` once the event loop has looked at I/O again: `setImmediate` (Deno, Node, Bun) costs
 * about a microsecond and lets the requests that arrived meanwhile join a group;
 * `setTimeout(fn, 0)` (at least a millisecond in Deno) is only the fallback of other runtimes.
 */
const nextTurn: (fn: () => void) => void = typeof globalThis.setImmediate === "function"
  ? (fn) => globalThis.setImmediate(fn)
  : (fn) => setTimeout(fn, 0);

/**
 * A first-in, first-out queue that groups consecutive items.
 *
 * @example Usage
 * ```ts
 * import { GroupQueue } from "./queue.ts";
 * import assert from "node:assert/strict";
 *
 * const groups: number[][] = [];
 * const queue = new GroupQueue<number>(
 *   async (items) => void groups.push(items),
 *   (_items, err) => console.error(err),
 * );
 * queue.push(1);
 * queue.push(2);
 * await queue.control(async () => {});
 * assert.deepEqual(groups, [[1, 2]]);
 * ```
 */
export class GroupQueue<T> {
  #commit: (items: T[]) => Promise<void>;
  #fail: (items: T[], err: unknown) => void;
  #queue: (T | ControlOp)[] = [];
  #draining: Promise<void> | undefined;

  /**
   * Creates an empty queue.
   *
   * @param commit Handles one group of consecutive items, settling each item itself.
   * @param fail Settles the items of a group whose `commit` threw (a bug, not a write error:
   *   `commit` reports those itself); the queue goes on with the next group.
   */
  constructor(
    commit: (items: T[]) => Promise<void>,
    fail: (items: T[], err: unknown) => void,
  ) {
    this.#commit = commit;
    this.#fail = fail;
  }

  /**
   * Queues an item; it joins the group of the items queued right before it.
   *
   * @param item The item.
   */
  push(item: T): void {
    this.#enqueue(item);
  }

  /**
   * Queues a function that runs alone, after everything queued before it.
   *
   * @param fn The work.
   * @returns Its result.
   */
  control<R>(fn: () => Promise<R>): Promise<R> {
    return new Promise((resolve, reject) => {
      this.#enqueue(new ControlOp(fn, resolve as (v: unknown) => void, reject));
    });
  }

  /**
   * Waits until the queue is empty.
   *
   * @returns When everything queued so far has been handled.
   */
  async idle(): Promise<void> {
    while (this.#draining) await this.#draining;
  }

  #enqueue(op: T | ControlOp): void {
    this.#queue.push(op);
    this.#draining ??= this.#drain();
  }

  async #drain(): Promise<void> {
    // Let every request the event loop has already received join the first group: the HTTP
    // layer hands over one request per turn of the loop, so a microtask would see only the
    // first, and each would pay a commit and a write(2) of its own (see nextTurn).
    await new Promise<void>((resolve) => nextTurn(resolve));
    try {
      while (this.#queue.length > 0) {
        const head = this.#queue[0]!;
        if (head instanceof ControlOp) {
          this.#queue.shift();
          try {
            head.resolve(await head.run());
          } catch (err) {
            head.reject(err);
          }
          continue;
        }
        let n = 1;
        while (n < this.#queue.length && !(this.#queue[n] instanceof ControlOp)) n++;
        const items = this.#queue.splice(0, n) as T[];
        try {
          await this.#commit(items);
        } catch (err) {
          this.#fail(items, err);
        }
      }
    } finally {
      this.#draining = undefined;
    }
  }
}
