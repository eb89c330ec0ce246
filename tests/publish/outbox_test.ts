/**
 * The publisher's outbox (docs/publish.md, "No backlog"): the latest payload per topic, in order
 * per topic, bounded by the number of topics however slow the broker.
 *
 * @module
 */

import assert from "node:assert/strict";
import { LatestOutbox } from "../../publish.ts";

Deno.test("LatestOutbox sends a topic set many times before it was sent once, with its latest payload", () => {
  const outbox = new LatestOutbox();
  for (let i = 0; i < 1000; i++) outbox.set("obs/s/state/weather", String(i));
  assert.deepEqual(outbox.take(), { topic: "obs/s/state/weather", payload: "999" });
  assert.equal(outbox.take(), undefined);
});

Deno.test("LatestOutbox holds a topic's next payload until the broker acknowledged the one in flight", () => {
  const outbox = new LatestOutbox();
  outbox.set("t", "1");
  assert.equal(outbox.take()?.payload, "1");
  outbox.set("t", "2");
  assert.equal(outbox.take(), undefined);
  outbox.settled("t", true);
  assert.equal(outbox.take()?.payload, "2");
});

Deno.test("LatestOutbox does not send again a payload the broker already has", () => {
  const outbox = new LatestOutbox();
  outbox.set("t", "online");
  outbox.take();
  outbox.settled("t", true);
  outbox.set("t", "online");
  assert.equal(outbox.due, 0);
});

Deno.test("LatestOutbox sends a topic again when its message failed", () => {
  const outbox = new LatestOutbox();
  outbox.set("t", "1");
  outbox.take();
  outbox.settled("t", false);
  assert.deepEqual(outbox.take(), { topic: "t", payload: "1" });
});

Deno.test("LatestOutbox makes every topic due again after a reconnection, in flight or not", () => {
  const outbox = new LatestOutbox();
  for (const t of ["a", "b", "c"]) outbox.set(t, t);
  outbox.take();
  outbox.take();
  outbox.resendAll();
  assert.deepEqual([outbox.take(), outbox.take(), outbox.take()].map((m) => m?.topic), [
    "a",
    "b",
    "c",
  ]);
});

Deno.test("LatestOutbox removes a topic with an empty retained payload, then forgets it", () => {
  const outbox = new LatestOutbox();
  outbox.set("t", "1");
  outbox.take();
  outbox.settled("t", true);
  outbox.remove("t");
  assert.deepEqual(outbox.take(), { topic: "t", payload: "" });
  outbox.settled("t", true);
  assert.equal(outbox.size, 0);
  outbox.resendAll();
  assert.equal(outbox.take(), undefined);
});

Deno.test("LatestOutbox holds one payload per topic however many are set while nothing is sent (seeded)", () => {
  const seed = Number(Deno.env.get("SEED") ?? Date.now() % 100_000);
  // deno-lint-ignore no-console
  console.log(`seed ${seed}`);
  let state = seed;
  const random = () => (state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  const outbox = new LatestOutbox();
  const latest = new Map<string, string>();
  for (let i = 0; i < 100_000; i++) {
    const topic = `obs/s/state/t${Math.floor(random() * 20)}`;
    outbox.set(topic, String(i));
    latest.set(topic, String(i));
  }
  assert.equal(outbox.size, latest.size);
  assert.equal(outbox.due, latest.size);
  const sent = new Map<string, string>();
  for (let m = outbox.take(); m !== undefined; m = outbox.take()) sent.set(m.topic, m.payload);
  assert.deepEqual(sent, latest);
});

Deno.test("LatestOutbox calls its callback when a topic becomes due", () => {
  let calls = 0;
  const outbox = new LatestOutbox(() => calls++);
  outbox.set("t", "1");
  assert.equal(calls, 1);
});
