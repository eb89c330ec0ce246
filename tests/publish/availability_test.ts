/**
 * A type's availability (docs/publish.md, "Availability"): the service's freshness rule, and the
 * next moment time alone changes it.
 *
 * @module
 */

import assert from "node:assert/strict";
import { availability } from "../../publish.ts";

const NOW = Date.parse("2026-11-27T10:00:00.000Z");
const iso = (ms: number) => new Date(ms).toISOString();

Deno.test("availability() is offline for a type never seen", () => {
  assert.deepEqual(availability({ critical: true, stale_after_s: 60 }, undefined, NOW), {
    online: false,
    changesAt: undefined,
  });
});

Deno.test("availability() turns offline the first millisecond a type is older than stale_after_s", () => {
  const rule = { critical: false, stale_after_s: 60 };
  const ts = iso(NOW - 30_000);
  const { online, changesAt } = availability(rule, ts, NOW);
  assert.equal(online, true);
  assert.equal(changesAt, NOW + 30_001);
  assert.equal(availability(rule, ts, NOW + 30_000).online, true);
  assert.equal(availability(rule, ts, changesAt!).online, false);
  assert.equal(availability(rule, ts, changesAt!).changesAt, undefined);
});

Deno.test("availability() is always online for a type without stale_after_s that is not critical", () => {
  assert.deepEqual(availability({ critical: false, stale_after_s: null }, iso(0), NOW), {
    online: true,
    changesAt: undefined,
  });
  assert.equal(availability(undefined, iso(NOW + 86_400_000), NOW).online, true);
});

Deno.test("availability() holds a ts more than a minute ahead offline until it comes within the minute", () => {
  const rule = { critical: true, stale_after_s: null };
  const ts = iso(NOW + 120_000);
  const ahead = availability(rule, ts, NOW);
  assert.deepEqual(ahead, { online: false, changesAt: NOW + 60_000 });
  assert.equal(availability(rule, ts, NOW + 60_000).online, true);
});
