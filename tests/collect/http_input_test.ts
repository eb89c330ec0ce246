/**
 * The collector's `http` input against real local HTTP servers and a real service
 * (docs/collect.md): the page's fields and time, the "unchanged source time posts nothing"
 * rule, and a hostile 100 MB page.
 *
 * @module
 */

import assert from "node:assert/strict";
import { tempDir, testServer } from "../_shared/util.ts";
import {
  linesWith,
  localServer,
  startCollector,
  storedEvents,
  waitUntil,
} from "../_shared/collect_util.ts";

Deno.test("http posts the fields the pointers name, stamped with the page's own time", async () => {
  await using dir = await tempDir();
  await using service = await testServer({ siteDir: dir.path });
  await using page = localServer(() =>
    Response.json({ obs: { t: 4.5, wind: [3, 9] }, at: "2026-11-27T01:02:03Z", noise: 1 })
  );
  await using _collector = startCollector([{
    name: "wx",
    kind: "http",
    type: "weather",
    url: `${page.url}/now.json`,
    fields: { temp_c: "/obs/t", gust: "/obs/wind/1" },
    ts: "/at",
    every_s: 0.1,
  }], service.url);
  await waitUntil(async () => (await storedEvents(dir.path)).length === 1, 10_000, "the event");
  const [event] = await storedEvents(dir.path);
  assert.equal(event!.type, "weather");
  assert.deepEqual(event!.data, { temp_c: 4.5, gust: 9 });
  assert.equal(event!.ts, "2026-11-27T01:02:03.000Z");
});

Deno.test("http posts nothing while the page's time has not moved, so a dead upstream goes stale", async () => {
  await using dir = await tempDir();
  await using service = await testServer({ siteDir: dir.path });
  let at = 1_800_000_000;
  await using page = localServer(() => Response.json({ t: 1, at }));
  await using _collector = startCollector([{
    name: "wx",
    kind: "http",
    type: "weather",
    url: page.url,
    ts: "/at",
    ts_format: "unix",
    every_s: 0.1,
  }], service.url);
  await waitUntil(() => page.requests() >= 8, 10_000, "eight polls");
  assert.equal((await storedEvents(dir.path)).length, 1, "one event for one source time");
  at += 60;
  await waitUntil(async () => (await storedEvents(dir.path)).length === 2, 10_000, "the next");
  const polls = page.requests();
  await waitUntil(() => page.requests() >= polls + 5, 10_000, "five more polls");
  const events = await storedEvents(dir.path);
  assert.deepEqual(events.map((e) => e.ts), [
    new Date(1_800_000_000_000).toISOString(),
    new Date(1_800_000_060_000).toISOString(),
  ]);
});

Deno.test("http reads an array page as its first element and, without fields, the whole object as data", async () => {
  await using dir = await tempDir();
  await using service = await testServer({ siteDir: dir.path });
  await using page = localServer(() => Response.json([{ safe: true, sky: -20 }, { safe: false }]));
  await using _collector = startCollector(
    [{ name: "rm", kind: "http", type: "safety", url: page.url, every_s: 30 }],
    service.url,
  );
  await waitUntil(async () => (await storedEvents(dir.path)).length === 1, 10_000, "the event");
  const [event] = await storedEvents(dir.path);
  assert.deepEqual(event!.data, { safe: true, sky: -20 });
  // No time on the page: the event is stamped when it was read.
  assert.ok(Math.abs(Date.parse(event!.ts) - Date.now()) < 10_000, event!.ts);
});

Deno.test("a 100 MB page is refused with one warning after reading at most its bound, and the other inputs keep posting", async () => {
  await using dir = await tempDir();
  await using service = await testServer({ siteDir: dir.path });
  const chunk = new Uint8Array(64 * 1024).fill(0x20);
  let sent = 0;
  await using hostile = localServer(() => {
    // 100 MB of spaces, then a JSON object, with no Content-Length: only reading can tell.
    let left = 100 * 1024 * 1024;
    return new Response(
      new ReadableStream<Uint8Array>({
        pull(controller) {
          if (left <= 0) {
            controller.enqueue(new TextEncoder().encode("{}"));
            controller.close();
            return;
          }
          controller.enqueue(chunk);
          left -= chunk.length;
          sent += chunk.length;
        },
      }, { highWaterMark: 1 }),
      { headers: { "content-type": "application/json" } },
    );
  });
  await using good = localServer(() => Response.json({ t: 1 }));
  const heapBefore = Deno.memoryUsage().heapUsed;
  await using collector = startCollector([
    { name: "hostile", kind: "http", type: "big", url: hostile.url, every_s: 0.1 },
    { name: "good", kind: "http", type: "weather", url: good.url, every_s: 0.2 },
  ], service.url);
  await waitUntil(() => hostile.requests() >= 3, 20_000, "three reads of the hostile page");
  await waitUntil(async () => (await storedEvents(dir.path)).length >= 3, 10_000, "good events");
  const warnings = linesWith(collector.log, "hostile");
  assert.equal(warnings.length, 1, JSON.stringify(collector.log));
  assert.match(warnings[0]!.message, /larger than 1048576 bytes; refused \(raise "max_bytes"/);
  // Reading stopped near the bound on each read: nowhere near 3 x 100 MB went out.
  assert.ok(sent < 3 * 8 * 1024 * 1024, `${sent} bytes sent`);
  assert.ok(Deno.memoryUsage().heapUsed - heapBefore < 64 * 1024 * 1024, "heap stayed bounded");
  assert.ok((await storedEvents(dir.path)).every((e) => e.type === "weather"));
});

Deno.test("an input that fails is logged once when it goes down and once when it comes back, and never stops the others", async () => {
  await using dir = await tempDir();
  await using service = await testServer({ siteDir: dir.path });
  let failing = false;
  await using flaky = localServer(() =>
    failing ? new Response("broken", { status: 500 }) : Response.json({ n: 1 })
  );
  await using steady = localServer(() => Response.json({ n: 2 }));
  await using collector = startCollector([
    { name: "flaky", kind: "http", type: "a", url: flaky.url, every_s: 0.1 },
    { name: "steady", kind: "http", type: "b", url: steady.url, every_s: 0.1 },
  ], service.url);
  await waitUntil(() => linesWith(collector.log, "flaky (http) up").length === 1, 10_000, "up");
  failing = true;
  const failedAt = flaky.requests();
  await waitUntil(() => flaky.requests() >= failedAt + 4, 20_000, "four failed polls");
  const steadyBefore = steady.requests();
  await waitUntil(() => steady.requests() >= steadyBefore + 3, 10_000, "steady polls on");
  failing = false;
  await waitUntil(
    () => linesWith(collector.log, "flaky (http) up").length === 2,
    20_000,
    "back up",
  );
  const flakyLines = linesWith(collector.log, /^input flaky /).map((l) => l.message);
  assert.equal(flakyLines.length, 3, flakyLines.join("\n"));
  assert.match(
    flakyLines[1]!,
    /^input flaky \(http\) down: GET http:\/\/127\.0\.0\.1:\d+\/ answered 500/,
  );
  assert.deepEqual(linesWith(collector.log, /^input steady /).length, 1);
});
