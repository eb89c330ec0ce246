/**
 * One capped exponential back-off for every retry loop of the package (the collector's inputs
 * and queue, the fleet's peers, the notification receivers, the client's reconnection): the wait
 * starts at a first delay, is multiplied by a factor after each failure up to a cap, may be
 * spread by a jitter, and starts again from the first delay after a success. Modelled on
 * `@std/async`'s `retry()` and on Vector's `ExponentialBackoff`. Web APIs only.
 *
 * @example Usage
 * ```ts
 * import { Backoff } from "./backoff.ts";
 * import assert from "node:assert/strict";
 *
 * const backoff = new Backoff({ firstMs: 500, maxMs: 10_000 });
 * assert.deepEqual(
 *   Array.from({ length: 7 }, () => backoff.next()),
 *   [500, 1000, 2000, 4000, 8000, 10_000, 10_000],
 * );
 * backoff.reset();
 * assert.equal(backoff.next(), 500);
 * ```
 *
 * @module
 */

import { sleep } from "./async.ts";

/**
 * Options of a {@linkcode Backoff}: the first delay and the cap, each caller's own, and the
 * factor and the jitter.
 *
 * @example The collector's queue to the service: from 500 ms doubling to 10 s, exact
 * ```ts
 * import { Backoff, type BackoffOptions } from "./backoff.ts";
 * import assert from "node:assert/strict";
 *
 * const options: BackoffOptions = { firstMs: 500, maxMs: 10_000, factor: 2, jitter: 0 };
 * assert.equal(new Backoff(options).next(), 500);
 * ```
 */
export interface BackoffOptions {
  /** The wait after the first failure, in milliseconds (at most `maxMs`). */
  firstMs: number;
  /** The longest wait, in milliseconds: the cap. */
  maxMs: number;
  /**
   * What each wait is multiplied by for the next one (at least 1).
   * @default {2}
   */
  factor?: number;
  /**
   * How far each wait is spread at random, as a fraction of it (0 to 1): `0.2` gives a wait
   * between 80 % and 120 % of the doubled one, rounded to whole milliseconds and still at most
   * `maxMs`. Without jitter, waits are exact.
   * @default {0}
   */
  jitter?: number;
  /**
   * The random source of the jitter, in [0, 1).
   * @default {Math.random}
   */
  random?: () => number;
}

/**
 * A capped exponential back-off: {@linkcode Backoff.next} gives the wait before the next try
 * and multiplies the following one, up to the cap; {@linkcode Backoff.reset} starts again after a
 * success.
 *
 * @example Doubling from 250 ms up to 30 s, with ±20 % jitter
 * ```ts
 * import { Backoff } from "./backoff.ts";
 * import assert from "node:assert/strict";
 *
 * const backoff = new Backoff({ firstMs: 250, maxMs: 30_000, jitter: 0.2 });
 * const first = backoff.next();
 * assert.ok(first >= 200 && first <= 300);
 * for (let i = 0; i < 20; i++) assert.ok(backoff.next() <= 30_000);
 * ```
 */
export class Backoff {
  readonly #first: number;
  readonly #max: number;
  readonly #factor: number;
  readonly #jitter: number;
  readonly #random: () => number;
  #current: number;
  #attempts = 0;

  /**
   * Creates a back-off whose next wait is the first delay.
   *
   * @param options The first delay, the cap, the factor and the jitter.
   * @throws {RangeError} When a delay is negative or not a number, the factor is below 1, or the
   * jitter is outside 0 to 1.
   *
   * @example Usage
   * ```ts
   * import { Backoff } from "./backoff.ts";
   * import assert from "node:assert/strict";
   *
   * assert.equal(new Backoff({ firstMs: 1000, maxMs: 60_000 }).next(), 1000);
   * assert.throws(() => new Backoff({ firstMs: -1, maxMs: 60_000 }), RangeError);
   * ```
   */
  constructor(options: BackoffOptions) {
    const { firstMs, maxMs, factor = 2, jitter = 0, random = Math.random } = options;
    if (!(firstMs >= 0) || !(maxMs >= 0)) {
      throw new RangeError(
        `A back-off's delays must be non-negative milliseconds, not ${firstMs} and ${maxMs}`,
      );
    }
    if (!(factor >= 1)) {
      throw new RangeError(`A back-off's factor must be at least 1, not ${factor}`);
    }
    if (!(jitter >= 0 && jitter <= 1)) {
      throw new RangeError(`A back-off's jitter must be between 0 and 1, not ${jitter}`);
    }
    this.#first = firstMs;
    this.#max = maxMs;
    this.#factor = factor;
    this.#jitter = jitter;
    this.#random = random;
    this.#current = firstMs;
  }

  /**
   * How many waits {@linkcode Backoff.next} gave since the start or the last
   * {@linkcode Backoff.reset}: the failures in a row, for a caller that counts them.
   *
   * @returns The count.
   *
   * @example Usage
   * ```ts
   * import { Backoff } from "./backoff.ts";
   * import assert from "node:assert/strict";
   *
   * const backoff = new Backoff({ firstMs: 10, maxMs: 100 });
   * backoff.next();
   * backoff.next();
   * assert.equal(backoff.attempts, 2);
   * backoff.reset();
   * assert.equal(backoff.attempts, 0);
   * ```
   */
  get attempts(): number {
    return this.#attempts;
  }

  /**
   * The wait before the next try, in milliseconds; the one after it is `factor` times longer, up
   * to `maxMs`.
   *
   * @returns The wait, never more than `maxMs`.
   *
   * @example Usage
   * ```ts
   * import { Backoff } from "./backoff.ts";
   * import assert from "node:assert/strict";
   *
   * const backoff = new Backoff({ firstMs: 1000, maxMs: 3000 });
   * assert.deepEqual([backoff.next(), backoff.next(), backoff.next()], [1000, 2000, 3000]);
   * ```
   */
  next(): number {
    const base = this.#current;
    this.#current = Math.min(this.#max, base * this.#factor);
    this.#attempts++;
    if (this.#jitter === 0) return Math.min(this.#max, base);
    const spread = 1 - this.#jitter + this.#random() * 2 * this.#jitter;
    return Math.min(this.#max, Math.round(base * spread));
  }

  /**
   * After a success: the next wait is the first delay again.
   *
   * @example Usage
   * ```ts
   * import { Backoff } from "./backoff.ts";
   * import assert from "node:assert/strict";
   *
   * const backoff = new Backoff({ firstMs: 500, maxMs: 10_000 });
   * backoff.next();
   * backoff.next();
   * backoff.reset();
   * assert.equal(backoff.next(), 500);
   * ```
   */
  reset(): void {
    this.#current = this.#first;
    this.#attempts = 0;
  }

  /**
   * Waits {@linkcode Backoff.next}, or less when `signal` aborts; never rejects.
   *
   * @param signal Ends the wait early when aborted.
   * @returns When the wait is over.
   *
   * @example Usage
   * ```ts
   * import { Backoff } from "./backoff.ts";
   * import assert from "node:assert/strict";
   *
   * const backoff = new Backoff({ firstMs: 1, maxMs: 10 });
   * await backoff.wait();
   * assert.equal(backoff.attempts, 1);
   * ```
   */
  async wait(signal?: AbortSignal): Promise<void> {
    await sleep(this.next(), signal);
  }
}
