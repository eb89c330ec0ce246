/**
 * Defects a review found in the collector (docs/collect.md), each with a real service, real files
 * or a real local server: the queue's accounting while a batch is in flight, the time of a merged
 * record, the Boltwood line's measurement time, the INDI input's back-off.
 *
 * @module
 */

import assert from "node:assert/strict";
import { TelemetryClient } from "../../client.ts";
import { Outbox } from "../../collect/outbox.ts";
import { spawnCollector } from "../../collect.ts";
import type { InputKind } from "../../collect/inputs/input.ts";
import { join } from "node:path";
import { tempDir, testServer } from "../_shared/util.ts";
import {
  linesWith,
  localServer,
  type LogLine,
  runUntilDrained,
  startCollector,
  storedEvents,
  waitUntil,
} from "../_shared/collect_util.ts";

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

/** A push kind: reads `{"type", "field", "value", "ts"}` lines from `url` until the stream ends. */
const streamKind: InputKind<{ url: string }> = {
  kind: "stream",
  polled: false,
  keys: ["url"],
  parse: (raw) => ({ url: String(raw.url) }),
  create: (config) => ({
    listen: async (sink, signal, up) => {
      const res = await fetch(config.url, { signal });
      up();
      let rest = "";
      for await (const chunk of res.body!.pipeThrough(new TextDecoderStream())) {
        rest += chunk;
        const lines = rest.split("\n");
        rest = lines.pop()!;
        for (const line of lines) {
          const v = JSON.parse(line);
          sink.field({ type: v.type, field: v.field, value: v.value, sourceTs: v.ts });
        }
      }
    },
  }),
};

/** A local server streaming the lines the test puts, one stream, until closed. */
function lineSource(): { url: string; put: (v: unknown) => void; close: () => Promise<void> } {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  const body = new ReadableStream<Uint8Array>({ start: (c) => void (controller = c) });
  const server = localServer(() => new Response(body));
  return {
    url: server.url,
    put: (v) => controller.enqueue(new TextEncoder().encode(JSON.stringify(v) + "\n")),
    close: async () => {
      try {
        controller.close();
      } catch { /* already closed */ }
      await server[Symbol.asyncDispose]();
    },
  };
}

/** Puts each line after the service stored the events before it, so each leaves on its own. */
async function mergedRecords(lines: unknown[][], expected: number): Promise<
  { ts: string; data: Record<string, unknown> }[]
> {
  await using dir = await tempDir();
  await using service = await testServer({ siteDir: dir.path });
  const source = lineSource();
  try {
    await using _collector = startCollector(
      [{ name: "s", kind: "stream", url: source.url, merge_ms: 50 }],
      service.url,
      undefined,
      [streamKind],
    );
    let stored = 0;
    for (const group of lines) {
      for (const line of group) source.put(line);
      // Either a new event is stored, or (a repeat) nothing within a while: then go on.
      const before = stored;
      await waitUntil(
        async () => (stored = (await storedEvents(dir.path)).length) > before,
        1_500,
        "",
      )
        .catch(() => {});
    }
    await waitUntil(async () => (await storedEvents(dir.path)).length >= expected, 5_000, "all");
    return await storedEvents(dir.path);
  } finally {
    await source.close();
  }
}

const T = 1_800_000_000_000;

Deno.test("a merged record after one wrong future time is stamped by its own values' time, not the wrong one", async () => {
  const events = await mergedRecords([
    [{ type: "wx", field: "t", value: 1, ts: T + 3_600_000 }],
    [{ type: "wx", field: "t", value: 2, ts: T + 1_000 }],
    [{ type: "wx", field: "t", value: 3, ts: T + 2_000 }],
  ], 3);
  assert.deepEqual(events.map((e) => e.data.t), [1, 2, 3]);
  assert.deepEqual(events.map((e) => Date.parse(e.ts) - T), [3_600_000, 1_000, 2_000]);
});

Deno.test("a second merged record in the same second is posted when its values differ, and a repeat is not", async () => {
  const events = await mergedRecords([
    [{ type: "wx", field: "t", value: 1, ts: T + 5_000 }],
    [{ type: "wx", field: "h", value: 60, ts: T + 5_000 }],
    [{ type: "wx", field: "h", value: 60, ts: T + 5_000 }],
    [{ type: "wx", field: "h", value: 61, ts: T + 6_000 }],
  ], 3);
  assert.deepEqual(events.map((e) => e.data), [{ t: 1 }, { t: 1, h: 60 }, { t: 1, h: 61 }]);
  assert.deepEqual(events.map((e) => Date.parse(e.ts) - T), [5_000, 5_000, 6_000]);
});

/** A Boltwood II line: local date and time, and seconds since the last valid data. */
const boltwood = (date: string, time: string, since: number, sky: string) =>
  `${date} ${time} C K ${sky} 12.1 13.0 3.2 78 8.4 0 0 0 ${
    String(since).padStart(5, "0")
  } 046352.95260 1 1 1 1 0 0\n`;

/** Rewrites a file and sets its modification time (epoch ms). */
async function rewrite(path: string, text: string, mtimeMs: number): Promise<void> {
  await Deno.writeTextFile(path, text);
  await Deno.utime(path, mtimeMs / 1000, mtimeMs / 1000);
}

/** A clock input polled at the file input's cadence: `polls(n)` waits until both were read n times. */
function ticker(): { server: AsyncDisposable; input: unknown; polls(n: number): Promise<void> } {
  const server = localServer(() => Response.json({}));
  return {
    server,
    input: { name: "tick", kind: "http", type: "tick", url: server.url, every_s: 0.1 },
    async polls(n: number) {
      const target = server.requests() + n;
      await waitUntil(() => server.requests() >= target, 10_000, `${n} polls`);
    },
  };
}

/** Runs a Boltwood `file` input over `lines` (text and mtime), each read before the next. */
async function boltwoodEvents(tz: string, lines: [string, number][]) {
  await using dir = await tempDir();
  await using site = await tempDir();
  await using service = await testServer({ siteDir: site.path });
  const path = join(dir.path, "clarity.txt");
  const tick = ticker();
  await using _ticker = tick.server;
  await rewrite(path, lines[0]![0], lines[0]![1]);
  await using _collector = startCollector([tick.input, {
    name: "cloud",
    kind: "file",
    type: "cloud",
    path,
    format: "boltwood",
    tz,
    every_s: 0.1,
  }], service.url);
  await tick.polls(3);
  for (const [text, mtime] of lines.slice(1)) {
    await rewrite(path, text, mtime);
    await tick.polls(3);
  }
  return (await storedEvents(site.path)).filter((e) => e.type === "cloud");
}

Deno.test("a Boltwood line rewritten by a dead sensor (since_s growing) is not posted as new", async () => {
  const events = await boltwoodEvents("UTC", [
    [boltwood("2026-11-26", "22:51:45.00", 4, "-28.5"), 1000_000],
    [boltwood("2026-11-26", "22:51:50.00", 9, "-28.5"), 1001_000],
    [boltwood("2026-11-26", "22:51:55.00", 14, "-28.5"), 1002_000],
    [boltwood("2026-11-26", "22:52:00.00", 0, "-20.0"), 1003_000],
  ]);
  assert.deepEqual(events.map((e) => [e.ts, e.data.sky_minus_ambient]), [
    ["2026-11-26T22:51:41.000Z", -28.5],
    ["2026-11-26T22:52:00.000Z", -20],
  ]);
});

Deno.test("a Boltwood line in the repeated autumn hour is timed by the offset nearest the file's modification time", async () => {
  // Berlin leaves summer time at 03:00 CEST on 2026-10-25: 02:30 is 00:30Z, then again 01:30Z.
  const events = await boltwoodEvents("Europe/Berlin", [
    [boltwood("2026-10-25", "02:30:00.00", 0, "-28.5"), Date.parse("2026-10-25T00:30:02Z")],
    [boltwood("2026-10-25", "02:30:00.00", 0, "-20.0"), Date.parse("2026-10-25T01:30:02Z")],
  ]);
  assert.deepEqual(events.map((e) => e.ts), [
    "2026-10-25T00:30:00.000Z",
    "2026-10-25T01:30:00.000Z",
  ]);
});

Deno.test("an INDI server that accepts and closes is backed off from, and the input is never logged up", async () => {
  await using dir = await tempDir();
  await using service = await testServer({ siteDir: dir.path });
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const accepts: number[] = [];
  const serving = (async () => {
    try {
      for await (const conn of listener) {
        accepts.push(Date.now());
        conn.close();
      }
    } catch { /* closed at the end */ }
  })();
  try {
    await using collector = startCollector([{
      name: "indi",
      kind: "indi",
      port: (listener.addr as Deno.NetAddr).port,
      devices: { "Weather Simulator": { type: "weather" } },
    }], service.url);
    await waitUntil(() => accepts.length >= 3, 15_000, "three connections");
    // 1 s after the first failure, then 2 s: the back-off doubles instead of resetting.
    assert.ok(
      accepts[2]! - accepts[1]! >= 1_500,
      `the gaps: ${accepts.map((t) => t - accepts[0]!)}`,
    );
    assert.deepEqual(linesWith(collector.log, / up$/), [], JSON.stringify(collector.log));
  } finally {
    listener.close();
    await serving;
  }
});

Deno.test("collect does not post again a batch the service stored but answered late", async () => {
  await using dir = await tempDir();
  await using site = await tempDir();
  await using service = await testServer({ siteDir: site.path });
  // In front of the service: the first post is stored at once and answered 6 s later (a stall).
  let posts = 0;
  let answered = false;
  await using proxy = localServer(async (req) => {
    const url = new URL(req.url);
    const res = await fetch(`${service.url}${url.pathname}${url.search}`, {
      method: req.method,
      headers: req.headers,
      body: req.method === "GET" || req.method === "HEAD" ? null : await req.arrayBuffer(),
    });
    if (req.method === "POST" && posts++ === 0) {
      const body = await res.arrayBuffer();
      await new Promise((r) => setTimeout(r, 6_000));
      answered = true;
      return new Response(body, { status: res.status, headers: res.headers });
    }
    return res;
  });
  const file = join(dir.path, "station.txt");
  await Deno.writeTextFile(file, "temp=4.5\n");
  const config = join(dir.path, "collect.json");
  await Deno.writeTextFile(
    config,
    JSON.stringify({
      inputs: [{ name: "st", kind: "file", type: "station", path: file, format: "keyvalue" }],
    }),
  );
  const collector = spawnCollector({
    config,
    host: "127.0.0.1",
    port: Number(new URL(proxy.url).port),
    output: "piped",
  });
  const output = collector.process.output();
  try {
    await waitUntil(() => answered, 20_000, "the late answer");
  } finally {
    await collector.stop();
  }
  const out = await output;
  const stderr = new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, stderr);
  const stored = (await storedEvents(site.path)).filter((e) => e.type === "station");
  assert.equal(stored.length, 1, `posted ${posts} times: ${new TextDecoder().decode(out.stdout)}`);
});

Deno.test("a backlog of events with large meta is posted in batches the service's body limit takes", async () => {
  await using site = await tempDir();
  await using service = await testServer({ siteDir: site.path });
  const log: LogLine[] = [];
  const outbox = new Outbox(
    new TelemetryClient({ baseUrl: service.url, timeoutMs: 10_000 }),
    (level, message) => log.push({ level, message }),
  );
  const note = "x".repeat(100_000);
  for (let i = 0; i < 20; i++) outbox.push({ type: "big", data: { i }, meta: { note } });
  await runUntilDrained(outbox, 20_000);
  assert.deepEqual(
    (await storedEvents(site.path)).map((e) => e.data.i),
    Array.from({ length: 20 }, (_, i) => i),
  );
  const metrics = await (await fetch(`${service.url}/metrics`)).text();
  assert.doesNotMatch(metrics, /telemetry_http_responses_total\{[^}]*code="413"[^}]*\}/, "no 413");
  assert.deepEqual(log, []);
});

Deno.test("a dead sensor's Boltwood lines written with hundredths and whole-second since_s are not posted as new", async () => {
  const events = await boltwoodEvents("UTC", [
    [boltwood("2026-11-26", "22:51:45.37", 4, "-28.5"), 1000_000],
    [boltwood("2026-11-26", "22:51:50.12", 9, "-28.5"), 1001_000],
    [boltwood("2026-11-26", "22:51:55.80", 14, "-28.5"), 1002_000],
    [boltwood("2026-11-26", "22:52:00.05", 0, "-20.0"), 1003_000],
  ]);
  assert.deepEqual(events.map((e) => [e.ts, e.data.sky_minus_ambient]), [
    ["2026-11-26T22:51:41.370Z", -28.5],
    ["2026-11-26T22:52:00.050Z", -20],
  ]);
});
