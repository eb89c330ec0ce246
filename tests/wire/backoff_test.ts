/**
 * The one capped back-off (`wire/backoff.ts`) that every retry loop uses: its waits, its cap,
 * its reset, its jitter and its checks. @module
 */

import assert from "node:assert/strict";
import { Backoff } from "../../wire/backoff.ts";

/** The first `n` waits of `backoff`. */
function waits(backoff: Backoff, n: number): number[] {
  return Array.from({ length: n }, () => backoff.next());
}

Deno.test("Backoff.next() gives the first delay first", () => {
  assert.equal(new Backoff({ firstMs: 250, maxMs: 30_000 }).next(), 250);
});

Deno.test("Backoff.next() doubles up to its cap", () => {
  const backoff = new Backoff({ firstMs: 500, maxMs: 10_000 });
  assert.deepEqual(waits(backoff, 8), [500, 1000, 2000, 4000, 8000, 10_000, 10_000, 10_000]);
});

Deno.test("Backoff.next() multiplies by its factor", () => {
  const backoff = new Backoff({ firstMs: 100, maxMs: 10_000, factor: 3 });
  assert.deepEqual(waits(backoff, 4), [100, 300, 900, 2700]);
});

Deno.test("Backoff.next() gives the cap when the first delay is above it", () => {
  const backoff = new Backoff({ firstMs: 5000, maxMs: 100 });
  assert.deepEqual(waits(backoff, 2), [100, 100]);
});

Deno.test("Backoff.next() stays at the cap after many failures, never Infinity or NaN", () => {
  const backoff = new Backoff({ firstMs: 1000, maxMs: 60_000 });
  const all = waits(backoff, 5000);
  assert.equal(all.at(-1), 60_000);
  assert.ok(all.every(Number.isFinite));
});

Deno.test("Backoff.next() stays at zero for a first delay of zero", () => {
  assert.deepEqual(waits(new Backoff({ firstMs: 0, maxMs: 60_000 }), 3), [0, 0, 0]);
});

Deno.test("Backoff.next() without jitter gives fractional delays exactly", () => {
  assert.deepEqual(waits(new Backoff({ firstMs: 1.5, maxMs: 100 }), 3), [1.5, 3, 6]);
});

Deno.test("Backoff.next() with jitter spreads each wait around the doubled one, rounded", () => {
  const low = new Backoff({ firstMs: 1000, maxMs: 30_000, jitter: 0.2, random: () => 0 });
  const high = new Backoff({ firstMs: 1000, maxMs: 30_000, jitter: 0.2, random: () => 0.999 });
  assert.deepEqual(waits(low, 3), [800, 1600, 3200]);
  assert.deepEqual(waits(high, 3), [1200, 2399, 4798]);
});

Deno.test("Backoff.next() with jitter never waits longer than the cap", () => {
  const backoff = new Backoff({ firstMs: 250, maxMs: 30_000, jitter: 0.2, random: () => 0.999 });
  assert.ok(waits(backoff, 20).every((ms) => ms <= 30_000));
  assert.equal(backoff.next(), 30_000);
});

Deno.test("Backoff.reset() makes the next wait the first delay again", () => {
  const backoff = new Backoff({ firstMs: 500, maxMs: 10_000 });
  waits(backoff, 4);
  backoff.reset();
  assert.equal(backoff.next(), 500);
});

Deno.test("Backoff.attempts counts the waits given since the last reset", () => {
  const backoff = new Backoff({ firstMs: 10, maxMs: 100 });
  assert.equal(backoff.attempts, 0);
  waits(backoff, 3);
  assert.equal(backoff.attempts, 3);
  backoff.reset();
  assert.equal(backoff.attempts, 0);
});

Deno.test("Backoff.wait() sleeps the next wait", async () => {
  const backoff = new Backoff({ firstMs: 30, maxMs: 1000 });
  const started = performance.now();
  await backoff.wait();
  assert.ok(performance.now() - started >= 25);
  assert.equal(backoff.next(), 60);
});

Deno.test("Backoff.wait() ends at once when its signal aborts", async () => {
  const backoff = new Backoff({ firstMs: 60_000, maxMs: 60_000 });
  const started = performance.now();
  await backoff.wait(AbortSignal.abort());
  assert.ok(performance.now() - started < 1000);
});

Deno.test("Backoff constructor refuses a negative or NaN delay", () => {
  assert.throws(() => new Backoff({ firstMs: -1, maxMs: 100 }), RangeError);
  assert.throws(() => new Backoff({ firstMs: 10, maxMs: NaN }), RangeError);
});

Deno.test("Backoff constructor refuses a factor below 1", () => {
  assert.throws(() => new Backoff({ firstMs: 10, maxMs: 100, factor: 0.5 }), RangeError);
});

Deno.test("Backoff constructor refuses a jitter outside 0 to 1", () => {
  assert.throws(() => new Backoff({ firstMs: 10, maxMs: 100, jitter: 1.5 }), RangeError);
  assert.throws(() => new Backoff({ firstMs: 10, maxMs: 100, jitter: -0.1 }), RangeError);
});
