/**
 * The collector's queue to the service (docs/collect.md, "Faults"), with a real client and a real
 * service that is down, then comes back on the same port: nothing is lost on a transient error,
 * events are drained in order, the bound drops the oldest with one warning.
 *
 * @module
 */

import assert from "node:assert/strict";
import { TelemetryClient } from "../../client.ts";
import { Outbox } from "../../collect/outbox.ts";
import type { InputKind } from "../../collect/inputs/input.ts";
import { freePort, tempDir, testServer } from "../_shared/util.ts";
import { answerDroppingProxy } from "../_shared/net.ts";
import {
  linesWith,
  localServer,
  type LogLine,
  runUntilDrained,
  startCollector,
  storedEvents,
  waitUntil,
} from "../_shared/collect_util.ts";

function outboxTo(port: number, log: LogLine[], capacity?: number): Outbox {
  return new Outbox(
    new TelemetryClient({ baseUrl: `http://127.0.0.1:${port}`, timeoutMs: 2000 }),
    (level, message) => log.push({ level, message }),
    capacity,
  );
}

Deno.test("while the service is down events wait, and are posted in order when it returns", async () => {
  await using site = await tempDir();
  const port = freePort();
  let n = 0;
  await using page = localServer(() => Response.json({ n: ++n }));
  await using collector = startCollector(
    [{ name: "counter", kind: "http", type: "count", url: page.url, every_s: 0.1 }],
    `http://127.0.0.1:${port}`,
  );
  await waitUntil(() => collector.outbox.size >= 10, 10_000, "ten queued events");
  assert.equal(linesWith(collector.log, "the service does not take events").length, 1);
  await using _service = await testServer({ siteDir: site.path, port });
  await waitUntil(() => collector.outbox.size === 0, 30_000, "the queue drained");
  await waitUntil(async () => (await storedEvents(site.path)).length >= 10, 10_000, "stored");
  const counts = (await storedEvents(site.path)).map((e) => e.data.n as number);
  assert.deepEqual(counts, counts.map((_, i) => i + 1), "every event, in order");
  assert.equal(linesWith(collector.log, "the service takes events again").length, 1);
});

Deno.test("a full queue drops the oldest events, counts them and warns once", async () => {
  await using site = await tempDir();
  const port = freePort();
  const log: LogLine[] = [];
  const outbox = outboxTo(port, log, 10_000);
  for (let i = 0; i < 10_050; i++) outbox.push({ type: "q", data: { i } });
  assert.equal(outbox.size, 10_000);
  assert.equal(outbox.dropped, 50);
  const warnings = log.filter((l) => l.level === "warn");
  assert.equal(warnings.length, 1, JSON.stringify(log));
  assert.match(warnings[0]!.message, /queue to the service is full \(10000 events\)/);
  await using _service = await testServer({ siteDir: site.path, port });
  await runUntilDrained(outbox, 60_000);
  const stored = (await storedEvents(site.path)).map((e) => e.data.i as number);
  assert.equal(stored.length, 10_000);
  assert.equal(stored[0], 50, "the oldest were the ones dropped");
  assert.equal(stored.at(-1), 10_049);
});

Deno.test("an event the service refuses is logged and left out, and the events around it are posted", async () => {
  await using site = await tempDir();
  await using service = await testServer({ siteDir: site.path });
  const log: LogLine[] = [];
  const outbox = outboxTo(service.addr.port, log);
  outbox.push({ type: "q", data: { i: 1 } });
  outbox.push({ type: "q".repeat(200), data: { i: 2 } });
  outbox.push({ type: "q", data: { i: 3 } });
  await runUntilDrained(outbox, 10_000);
  assert.deepEqual((await storedEvents(site.path)).map((e) => e.data.i), [1, 3]);
  assert.equal(outbox.refused, 1);
  assert.equal(log.filter((l) => l.level === "error").length, 1, JSON.stringify(log));
});

Deno.test("a stopping collector posts what it holds before it ends", async () => {
  await using site = await tempDir();
  await using service = await testServer({ siteDir: site.path });
  await using page = localServer(() => Response.json({ n: 1 }));
  const collector = startCollector(
    [{ name: "once", kind: "http", type: "last", url: page.url, every_s: 3600 }],
    service.url,
  );
  await waitUntil(() => page.requests() === 1, 10_000, "the read");
  const left = await collector.stop();
  assert.equal(left, 0);
  assert.equal((await storedEvents(site.path)).length, 1);
});

Deno.test("a stopping collector does not wait for a read that never ends", async () => {
  await using site = await tempDir();
  await using service = await testServer({ siteDir: site.path });
  let reads = 0;
  const stuck: InputKind<null> = {
    kind: "stuck",
    polled: true,
    keys: [],
    parse: () => null,
    create: () => ({
      poll: () => {
        reads++;
        return new Promise<void>(() => {}); // an open that blocks forever
      },
    }),
  };
  const collector = startCollector(
    [{ name: "stuck", kind: "stuck", type: "s", every_s: 1 }],
    service.url,
    undefined,
    [stuck],
  );
  await waitUntil(() => reads === 1, 10_000, "the read");
  const started = Date.now();
  assert.equal(await collector.stop(), 0);
  assert.ok(Date.now() - started < 2000, `${Date.now() - started} ms to stop`);
});

Deno.test("a backlog of large records is posted in batches the service's body limit takes", async () => {
  await using site = await tempDir();
  await using service = await testServer({ siteDir: site.path });
  const log: LogLine[] = [];
  const outbox = outboxTo(service.addr.port, log);
  const big = "x".repeat(100_000);
  for (let i = 0; i < 20; i++) outbox.push({ type: "big", data: { i, big } });
  await runUntilDrained(outbox, 20_000);
  assert.deepEqual(
    (await storedEvents(site.path)).map((e) => e.data.i),
    Array.from({ length: 20 }, (_, i) => i),
  );
  const metrics = await (await fetch(`${service.url}/metrics`)).text();
  assert.doesNotMatch(metrics, /telemetry_http_responses_total\{[^}]*code="413"[^}]*\}/, "no 413");
  assert.deepEqual(log, []);
});

Deno.test("Outbox.run() posts a batch again with its Idempotency-Key after its answer was lost, and it is stored once", async () => {
  await using site = await tempDir();
  await using service = await testServer({ siteDir: site.path });
  await using proxy = answerDroppingProxy(service.addr.port, 1);
  const outbox = outboxTo(proxy.port, []);
  for (let i = 0; i < 3; i++) outbox.push({ type: "q", data: { i } });
  await runUntilDrained(outbox, 30_000);
  assert.equal(proxy.dropped(), 1, "the first answer was lost");
  assert.deepEqual((await storedEvents(site.path)).map((e) => e.data.i), [0, 1, 2]);
});

Deno.test("Outbox.run() asks the service for the minimal answer of each batch", async () => {
  await using site = await tempDir();
  await using service = await testServer({ siteDir: site.path });
  const seen: (string | null)[] = [];
  // A pass-through in front of the service that notes each post's Prefer header.
  await using front = localServer(async (req) => {
    seen.push(req.headers.get("prefer"));
    const url = new URL(req.url);
    return await fetch(`${service.url}${url.pathname}`, {
      method: req.method,
      headers: req.headers,
      body: await req.arrayBuffer(),
    });
  });
  const outbox = outboxTo(Number(new URL(front.url).port), []);
  for (let i = 0; i < 3; i++) outbox.push({ type: "q", data: { i } });
  await runUntilDrained(outbox, 30_000);
  assert.deepEqual(seen, ["return=minimal"]);
  assert.deepEqual((await storedEvents(site.path)).map((e) => e.data.i), [0, 1, 2]);
});
