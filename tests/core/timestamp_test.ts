/**
 * `TimestampCache` (`core/timestamp.ts`): receive times formatted exactly as `formatTimestamp` does,
 * whatever order they come in.
 * @module
 */
import assert from "node:assert/strict";
import { formatTimestamp } from "../../event.ts";
import { TimestampCache } from "../../core/timestamp.ts";
import { Rng, seedFromEnv } from "../_shared/fault_util.ts";

Deno.test("TimestampCache.format() gives formatTimestamp()'s text for times in any order, across minutes, days and years", () => {
  const seed = seedFromEnv(1125);
  const rng = new Rng(seed);
  const cache = new TimestampCache();
  let ms = Date.UTC(2026, 11, 31, 23, 58, 0, 0);
  for (let i = 0; i < 20_000; i++) {
    // Mostly small steps forward (as under load), sometimes a clock step back or far ahead.
    const step = rng.pick([0, 1, 7, 999, 1000, 59_999, 60_000, -1, -60_001, 86_400_000]);
    ms += rng.chance(0.05) ? rng.int(-3e11, 3e11) : step;
    assert.equal(cache.format(ms), formatTimestamp(ms), `seed ${seed}, ms ${ms}`);
  }
});

Deno.test("TimestampCache.format() handles the years 0001 and 9999 and refuses beyond them", () => {
  const cache = new TimestampCache();
  const year1 = new Date("0001-01-01T00:00:00.000Z").getTime();
  assert.equal(cache.format(year1 + 61_001), "0001-01-01T00:01:01.001Z");
  assert.equal(cache.format(year1 + 61_002), "0001-01-01T00:01:01.002Z");
  const last = new Date("9999-12-31T23:59:59.999Z").getTime();
  assert.equal(cache.format(last), "9999-12-31T23:59:59.999Z");
  assert.throws(() => cache.format(last + 1), RangeError);
});

Deno.test("TimestampCache.format() truncates a fractional millisecond as toISOString() does", () => {
  const cache = new TimestampCache();
  const ms = Date.UTC(2026, 10, 25, 19, 0, 5, 42);
  assert.equal(cache.format(ms), "2026-11-25T19:00:05.042Z");
  assert.equal(cache.format(ms + 0.7), "2026-11-25T19:00:05.042Z");
  assert.equal(cache.format(ms + 1.5), "2026-11-25T19:00:05.043Z");
});
