/**
 * Defects a review found in the collector (docs/collect.md), each with a real service, real files
 * or a real local server: the queue's accounting while a batch is in flight, the time of a merged
 * record, the Boltwood line's measurement time, the INDI input's back-off.
 *
 * @module
 */

import assert from "node:assert/strict";
import { TelemetryClient } from "../client.ts";
import { Outbox } from "../collect/outbox.ts";
import { tempDir, testServer } from "./_util.ts";
import { localServer, type LogLine, storedEvents, waitUntil } from "./_collect_util.ts";

Deno.test("a full queue never loses an event in flight: each is posted once or counted as dropped, in order", async () => {
  await using site = await tempDir();
  await using service = await testServer({ siteDir: site.path });
  // A stand-in in front of the real service that holds the first post until released.
  let release!: () => void;
  const gate = new Promise<void>((resolve) => release = resolve);
  let posts = 0;
  await using proxy = localServer(async (req) => {
    if (posts++ === 0) await gate;
    const body = await req.text();
    return await fetch(`${service.url}/events`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
    });
  });
  const log: LogLine[] = [];
  const outbox = new Outbox(
    new TelemetryClient({ baseUrl: proxy.url, timeoutMs: 10_000 }),
    (level, message) => log.push({ level, message }),
    10,
  );
  for (let i = 0; i < 10; i++) outbox.push({ type: "q", data: { i } });
  const stop = new AbortController();
  const sending = outbox.run(stop.signal);
  try {
    await waitUntil(() => posts === 1, 10_000, "the first batch in flight");
    for (let i = 10; i < 13; i++) outbox.push({ type: "q", data: { i } });
    release();
    await waitUntil(() => outbox.size === 0, 10_000, "drained");
  } finally {
    release();
    stop.abort();
    await sending;
  }
  const stored = (await storedEvents(site.path)).map((e) => e.data.i as number);
  assert.equal(new Set(stored).size, stored.length, `no event posted twice: ${stored}`);
  assert.deepEqual(stored, [...stored].sort((a, b) => a - b), "in order");
  assert.equal(stored.length + outbox.dropped, 13, `posted ${stored}, dropped ${outbox.dropped}`);
  assert.deepEqual(stored.slice(0, 10), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], "the batch in flight");
  assert.equal(stored.at(-1), 12, "the newest is kept");
});
