/**
 * The idempotency keys the service remembers (docs/http-api.md, "Idempotency-Key"): for each key
 * answered in the last 24 hours, the hash of its request and where its answer is kept
 * (`store/key_journal.ts`), and the keys whose first request is still being answered, so that a
 * second request with one of them waits for that answer instead of storing its events again.
 *
 * Memory is bounded: at most `maxKeys` keys are remembered (100,000 by default: measured at about
 * 300 bytes each with a UUID for key, 28 MiB in all, and 44 MiB with 200-character keys), the
 * oldest forgotten first; a forgotten key's request, sent again, is stored again (docs/storage.md,
 * "Idempotency keys", says why that bound holds every retry the client and the collector make).
 *
 * @example Usage
 * ```ts
 * import { IdempotencyKeys } from "./idempotency.ts";
 * import assert from "node:assert/strict";
 *
 * const keys = new IdempotencyKeys({ clock: () => 0 });
 * assert.equal(keys.claim("k1", "h1").kind, "claimed");
 * keys.remember("k1", { hash: "h1", at: 0, ref: { gen: 1, offset: 0, length: 10 } });
 * keys.release("k1");
 * assert.equal(keys.claim("k1", "h1").kind, "replay");
 * assert.equal(keys.claim("k1", "h2").kind, "conflict");
 * ```
 *
 * @module
 */

import type { KeyRef } from "../store/key_journal.ts";

/** How long a key is remembered: 24 hours (docs/http-api.md). */
export const IDEMPOTENCY_KEY_MS = 24 * 60 * 60 * 1000;
/** How many keys are remembered at most, by default (docs/storage.md). */
export const DEFAULT_MAX_IDEMPOTENCY_KEYS = 100_000;
/** How often, at most, forgetting keys before their 24 hours is warned about. */
const FORGET_WARNING_MS = 60 * 60 * 1000;

/** A remembered key: the hash of its request, when it was answered, where its answer is. */
export interface KeyEntry {
  /** The hash of the request (its route and body). */
  hash: string;
  /** When it was answered, epoch milliseconds. */
  at: number;
  /** Where its answer is kept. */
  ref: KeyRef;
}

/** An entry with its key, as the order of answers keeps it. */
interface Remembered extends KeyEntry {
  key: string;
}

/** What {@linkcode IdempotencyKeys.claim} found. */
export type Claim =
  /** The key is new: the caller answers the request, then calls `release`. */
  | { kind: "claimed" }
  /** The key was answered for this same request: answer it again. */
  | { kind: "replay"; entry: KeyEntry }
  /** The key was answered for another request. */
  | { kind: "conflict"; entry: KeyEntry }
  /** The key's first request is being answered: claim again once this settles. */
  | { kind: "wait"; settled: Promise<void> };

/** Options of {@linkcode IdempotencyKeys}. */
export interface IdempotencyKeysOptions {
  /** The clock, epoch milliseconds. */
  clock: () => number;
  /**
   * How many keys are remembered at most.
   * @default {100000}
   */
  maxKeys?: number | undefined;
  /**
   * How long a key is remembered, in milliseconds.
   * @default {86400000}
   */
  maxAgeMs?: number;
  /** Told (at most once an hour) when keys are forgotten before their time. */
  warn?: (message: string) => void;
}

/**
 * The remembered keys, in the order they were answered (a `Map` keeps insertion order, so the
 * oldest is always first), and the keys being answered.
 *
 * @example Usage
 * ```ts
 * import { IdempotencyKeys } from "./idempotency.ts";
 * import assert from "node:assert/strict";
 *
 * const keys = new IdempotencyKeys({ clock: () => 0, maxKeys: 1 });
 * keys.remember("a", { hash: "h", at: 0, ref: { gen: 1, offset: 0, length: 1 } });
 * keys.remember("b", { hash: "h", at: 0, ref: { gen: 1, offset: 2, length: 1 } });
 * assert.equal(keys.size, 1);
 * assert.equal(keys.claim("a", "h").kind, "claimed");
 * ```
 */
export class IdempotencyKeys {
  #entries = new Map<string, Remembered>();
  /**
   * The remembered entries, oldest first, from `#head` on: the oldest is found here, not by
   * iterating the `Map`, whose deleted slots an iteration from its start walks over until it is
   * rebuilt (at the bound, one per key answered).
   */
  #order: (Remembered | undefined)[] = [];
  #head = 0;
  /** The keys being answered, with the promise their waiters wait on, made by the first waiter. */
  #pending = new Map<string, { settled?: Promise<void>; settle?: () => void }>();
  #clock: () => number;
  #maxKeys: number;
  #maxAgeMs: number;
  #warn: (message: string) => void;
  #forgotten = 0;
  #warnedAt = -Infinity;

  /**
   * Creates an empty set of keys.
   *
   * @param options The clock, the bounds and where warnings go.
   */
  constructor(options: IdempotencyKeysOptions) {
    this.#clock = options.clock;
    this.#maxKeys = options.maxKeys ?? DEFAULT_MAX_IDEMPOTENCY_KEYS;
    this.#maxAgeMs = options.maxAgeMs ?? IDEMPOTENCY_KEY_MS;
    this.#warn = options.warn ?? (() => {});
  }

  /** How many keys are remembered. */
  get size(): number {
    return this.#entries.size;
  }

  /** How long a key is remembered, in milliseconds. */
  get maxAgeMs(): number {
    return this.#maxAgeMs;
  }

  /**
   * Looks a key up and, when it is new, claims it: until {@linkcode IdempotencyKeys.release},
   * every other claim of it waits.
   *
   * @param key The `Idempotency-Key`.
   * @param hash The hash of this request.
   * @returns What to do with the request.
   */
  claim(key: string, hash: string): Claim {
    const entry = this.#entries.get(key);
    // An entry past its time is no longer there; `remember` clears such entries out.
    if (entry !== undefined && entry.at > this.#clock() - this.#maxAgeMs) {
      return entry.hash === hash ? { kind: "replay", entry } : { kind: "conflict", entry };
    }
    const pending = this.#pending.get(key);
    if (pending !== undefined) {
      pending.settled ??= new Promise<void>((resolve) => (pending.settle = resolve));
      return { kind: "wait", settled: pending.settled };
    }
    this.#pending.set(key, {});
    return { kind: "claimed" };
  }

  /**
   * Ends a claim, whether its request was answered (and remembered) or refused; the requests
   * waiting for it claim again. Releasing a key not claimed does nothing.
   *
   * @param key The key.
   */
  release(key: string): void {
    const pending = this.#pending.get(key);
    if (pending === undefined) return;
    this.#pending.delete(key);
    pending.settle?.();
  }

  /**
   * Remembers an answered key, as the newest; past `maxKeys` the oldest is forgotten.
   *
   * @param key The key.
   * @param entry Its hash, time and answer.
   */
  remember(key: string, entry: KeyEntry): void {
    this.#expire();
    const remembered: Remembered = { ...entry, key };
    this.#entries.set(key, remembered);
    this.#order.push(remembered);
    let early = 0;
    while (this.#entries.size > this.#maxKeys) {
      this.#dropOldest();
      early++;
    }
    if (early > 0) this.#forgot(early, `more than ${this.#maxKeys} keys were answered`);
  }

  /**
   * Forgets every key kept in a journal generation that was deleted, and in those before it.
   *
   * @param gen The deleted generation.
   */
  forgetGeneration(gen: number): void {
    const recent = this.#clock() - this.#maxAgeMs;
    let early = 0;
    for (let oldest = this.#oldest(); oldest && oldest.ref.gen <= gen; oldest = this.#oldest()) {
      this.#dropOldest();
      if (oldest.at > recent) early++;
    }
    if (early > 0) this.#forgot(early, "the journal of keys reached its size bound");
  }

  /** Forgets the keys older than `maxAgeMs`: the oldest are first. */
  #expire(): void {
    const before = this.#clock() - this.#maxAgeMs;
    for (let oldest = this.#oldest(); oldest && oldest.at <= before; oldest = this.#oldest()) {
      this.#dropOldest();
    }
  }

  /** The oldest entry still remembered, passing over those remembered again since. */
  #oldest(): Remembered | undefined {
    while (this.#head < this.#order.length) {
      const entry = this.#order[this.#head]!;
      if (this.#entries.get(entry.key) === entry) return entry;
      this.#order[this.#head++] = undefined;
    }
    return undefined;
  }

  /** Forgets the oldest entry. */
  #dropOldest(): void {
    const oldest = this.#oldest();
    if (oldest === undefined) return;
    this.#entries.delete(oldest.key);
    this.#order[this.#head++] = undefined;
    // The consumed front is dropped now and then, so the array follows the number of keys.
    if (this.#head > 1024 && this.#head * 2 > this.#order.length) {
      this.#order = this.#order.slice(this.#head);
      this.#head = 0;
    }
  }

  #forgot(count: number, why: string): void {
    this.#forgotten += count;
    const now = this.#clock();
    if (now - this.#warnedAt < FORGET_WARNING_MS) return;
    this.#warnedAt = now;
    this.#warn(
      `Forgot ${this.#forgotten} Idempotency-Key(s) younger than 24 hours because ${why}; a retry of one of them is stored again (docs/storage.md, "Idempotency keys"). This warning repeats at most once an hour.`,
    );
    this.#forgotten = 0;
  }
}
