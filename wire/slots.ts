/**
 * A fixed number of slots, and a bounded queue of those waiting for one, each waiting at most a
 * set time: how `GET /history` is served only so many at once (docs/history.md, "Readers at
 * once"). Web APIs only.
 *
 * @module
 */

/**
 * A slot could not be had: every slot was held and the queue full (`"full"`, refused at once), or
 * the wait was over before one came free (`"timeout"`).
 *
 * @example Usage
 * ```ts
 * import { SlotsBusyError } from "./slots.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(new SlotsBusyError("full").reason, "full");
 * ```
 */
export class SlotsBusyError extends Error {
  /** Why: the queue was full, or the wait timed out. */
  readonly reason: "full" | "timeout";
  /**
   * Creates the error.
   *
   * @param reason The queue was full, or the wait timed out.
   */
  constructor(reason: "full" | "timeout") {
    super(
      reason === "full"
        ? "Every slot is held and the queue of those waiting is full"
        : "No slot came free within the longest wait",
    );
    this.name = "SlotsBusyError";
    this.reason = reason;
  }
}

/** Options of {@linkcode Slots}. */
export interface SlotsOptions {
  /** How many may hold a slot at once (at least 1). */
  size: number;
  /** How many may wait at once; past it {@linkcode Slots.take} is refused at once. */
  maxWaiting: number;
  /** The longest a taker waits, in milliseconds. */
  waitMs: number;
  /** When it aborts (a server stopping), every taker waiting is refused with its reason. */
  signal?: AbortSignal | undefined;
}

interface Waiter {
  deadline: number;
  resolve: (release: () => void) => void;
  reject: (err: unknown) => void;
}

/**
 * Slots handed out in order of asking. What the queue holds is bounded (`maxWaiting` entries,
 * one timer for all of them, since they all wait the same time and the first in line is the
 * first whose wait ends).
 *
 * @example Usage
 * ```ts
 * import { Slots, SlotsBusyError } from "./slots.ts";
 * import assert from "node:assert/strict";
 *
 * const slots = new Slots({ size: 1, maxWaiting: 1, waitMs: 1000 });
 * const release = await slots.take();
 * const next = slots.take(); // waits: the one slot is held
 * await assert.rejects(slots.take(), SlotsBusyError); // the queue is full
 * release();
 * (await next)(); // the slot passed on in order, then given back
 * assert.equal(slots.held, 0);
 * ```
 */
export class Slots {
  #free: number;
  #size: number;
  #maxWaiting: number;
  #waitMs: number;
  #signal: AbortSignal | undefined;
  #queue: Waiter[] = [];
  #timer: ReturnType<typeof setTimeout> | undefined;

  /**
   * Creates the slots, all free.
   *
   * @param options How many, how many may wait, how long, and what refuses every waiter.
   * @throws {RangeError} If `size` is not a whole number of at least 1.
   */
  constructor(options: SlotsOptions) {
    if (!Number.isSafeInteger(options.size) || options.size < 1) {
      throw new RangeError(
        `The number of slots must be a whole number of at least 1, not ${options.size}`,
      );
    }
    this.#free = this.#size = options.size;
    this.#maxWaiting = options.maxWaiting;
    this.#waitMs = options.waitMs;
    this.#signal = options.signal;
    this.#signal?.addEventListener("abort", () => this.#refuseAll(), { once: true });
  }

  /** Slots held now. */
  get held(): number {
    return this.#size - this.#free;
  }

  /** Takers waiting now. */
  get waiting(): number {
    return this.#queue.length;
  }

  /**
   * Takes a slot: at once while one is free, else after those who asked before, within the
   * longest wait.
   *
   * @returns Gives the slot back (to the first in line, if any); calling it again does nothing.
   * @throws {SlotsBusyError} `"full"` at once while the queue is full, `"timeout"` when the wait
   *   is over.
   * @throws {unknown} The signal's reason once it aborted.
   */
  take(): Promise<() => void> {
    if (this.#signal?.aborted) return Promise.reject(this.#signal.reason);
    if (this.#free > 0) {
      this.#free--;
      return Promise.resolve(this.#release());
    }
    if (this.#queue.length >= this.#maxWaiting) {
      return Promise.reject(new SlotsBusyError("full"));
    }
    return new Promise((resolve, reject) => {
      this.#queue.push({ deadline: performance.now() + this.#waitMs, resolve, reject });
      if (this.#timer === undefined) this.#arm();
    });
  }

  /** A function that gives one slot back, once. */
  #release(): () => void {
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      const next = this.#queue.shift();
      if (next) next.resolve(this.#release());
      else this.#free++;
      if (this.#queue.length === 0) this.#disarm();
    };
  }

  /** The one timer: when the first in line stops waiting. */
  #arm(): void {
    const first = this.#queue[0];
    if (!first) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      const now = performance.now();
      // A timer may fire a little early: whoever is not yet due is waited for again.
      while (this.#queue.length > 0 && this.#queue[0]!.deadline <= now) {
        this.#queue.shift()!.reject(new SlotsBusyError("timeout"));
      }
      this.#arm();
    }, Math.max(1, first.deadline - performance.now()));
  }

  #disarm(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #refuseAll(): void {
    this.#disarm();
    for (const waiter of this.#queue.splice(0)) waiter.reject(this.#signal!.reason);
  }
}
