/**
 * `Slots` (wire/slots.ts): a fixed number held at once, the rest waiting in order in a bounded
 * queue, each for at most its time (docs/history.md, "Readers at once").
 */

import assert from "node:assert/strict";
import { Slots, SlotsBusyError } from "../../wire/slots.ts";

Deno.test("Slots hands a slot given back to the first in line, in the order they asked", async () => {
  const slots = new Slots({ size: 2, maxWaiting: 10, waitMs: 10_000 });
  const a = await slots.take();
  const b = await slots.take();
  const order: string[] = [];
  const c = slots.take().then((release) => (order.push("c"), release));
  const d = slots.take().then((release) => (order.push("d"), release));
  assert.equal(slots.waiting, 2);
  b();
  (await c)();
  a();
  (await d)();
  assert.deepEqual(order, ["c", "d"]);
  assert.equal(slots.held, 0);
  assert.equal(slots.waiting, 0);
});

Deno.test("Slots refuses a taker at once while maxWaiting others wait", async () => {
  const slots = new Slots({ size: 1, maxWaiting: 2, waitMs: 10_000 });
  const held = await slots.take();
  const waiting = [slots.take(), slots.take()];
  await assert.rejects(
    slots.take(),
    (err) => err instanceof SlotsBusyError && err.reason === "full",
  );
  held();
  for (const w of waiting) (await w)();
  assert.equal(slots.held, 0);
});

Deno.test("Slots refuses a waiter whose wait is over, and the next in line still gets its turn", async () => {
  const slots = new Slots({ size: 1, maxWaiting: 5, waitMs: 50 });
  const held = await slots.take();
  const t0 = performance.now();
  await assert.rejects(
    slots.take(),
    (err) => err instanceof SlotsBusyError && err.reason === "timeout",
  );
  assert.ok(performance.now() - t0 >= 45, "refused before its wait was over");
  assert.equal(slots.waiting, 0);
  const next = slots.take();
  held();
  (await next)();
  assert.equal(slots.held, 0);
});

Deno.test("Slots gives one slot back however often its release is called", async () => {
  const slots = new Slots({ size: 1, maxWaiting: 5, waitMs: 10_000 });
  const release = await slots.take();
  release();
  release();
  assert.equal(slots.held, 0);
  const again = await slots.take();
  assert.equal(slots.held, 1);
  const waiting = slots.take();
  release(); // the old release again: it must not hand out a second slot
  assert.equal(slots.waiting, 1);
  again();
  (await waiting)();
});

Deno.test("Slots refuses every waiter, and every later taker, once its signal aborts", async () => {
  const stop = new AbortController();
  const slots = new Slots({ size: 1, maxWaiting: 5, waitMs: 10_000, signal: stop.signal });
  const held = await slots.take();
  const waiting = [slots.take(), slots.take()];
  stop.abort(new Error("stopping"));
  for (const w of waiting) await assert.rejects(w, /stopping/);
  await assert.rejects(slots.take(), /stopping/);
  held();
});

Deno.test("Slots refuses a size below 1", () => {
  assert.throws(() => new Slots({ size: 0, maxWaiting: 1, waitMs: 1 }), RangeError);
});
