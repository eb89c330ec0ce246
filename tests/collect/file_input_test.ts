/**
 * The collector's `file` input against real files rewritten between polls and a real service
 * (docs/collect.md): the Boltwood line and its local time, key=value and JSON files, the
 * modification-time rule, and a FIFO in place of the file.
 *
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { tempDir, testServer } from "../_shared/util.ts";
import {
  linesWith,
  type LocalServer,
  localServer,
  startCollector,
  storedEvents,
  waitUntil,
} from "../_shared/collect_util.ts";

const BOLTWOOD = (time: string, sky: string) =>
  `2026-11-26 ${time} C K ${sky} 12.1 13.0 3.2 78 8.4 0 0 0 00004 046352.95260 1 1 1 1 0 0\n`;

/**
 * A clock input polled at the cadence of the file inputs: once it was read `n` more times, so
 * was every file input of the same collector (the wait for "polled, and posted nothing").
 */
function ticker(): {
  server: LocalServer;
  input: Record<string, unknown>;
  polls(n: number): Promise<void>;
} {
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

/** The stored events of a type. */
async function eventsOf(siteDir: string, type: string) {
  return (await storedEvents(siteDir)).filter((e) => e.type === type);
}

/** Rewrites a file and moves its modification time on (coarse clocks would hide a rewrite). */
async function rewrite(path: string, text: string, mtimeS: number): Promise<void> {
  await Deno.writeTextFile(path, text);
  await Deno.utime(path, mtimeS, mtimeS);
}

Deno.test("a Boltwood file posts each new line once, named by its columns and timed by its local date and time", async () => {
  await using dir = await tempDir();
  await using site = await tempDir();
  await using service = await testServer({ siteDir: site.path });
  const path = join(dir.path, "clarity.txt");
  await rewrite(path, BOLTWOOD("22:51:45.00", "-28.5"), 1000);
  const tick = ticker();
  await using _ticker = tick.server;
  await using _collector = startCollector([tick.input, {
    name: "cloud",
    kind: "file",
    type: "cloud",
    path,
    format: "boltwood",
    tz: "America/Santiago",
    every_s: 0.1,
  }], service.url);
  await waitUntil(async () => (await eventsOf(site.path, "cloud")).length === 1, 10_000, "line 1");
  // Rewritten with the same line (the sensor program stalled): nothing new was measured.
  await rewrite(path, BOLTWOOD("22:51:45.00", "-28.5"), 1001);
  await tick.polls(3);
  assert.equal((await eventsOf(site.path, "cloud")).length, 1);
  await rewrite(path, BOLTWOOD("22:52:45.00", "-20.0"), 1002);
  await waitUntil(async () => (await eventsOf(site.path, "cloud")).length === 2, 10_000, "line 2");
  const events = await eventsOf(site.path, "cloud");
  // Santiago is UTC-3 in November (summer time); the lines' since_s (4 s) is taken off.
  assert.deepEqual(events.map((e) => e.ts), [
    "2026-11-27T01:51:41.000Z",
    "2026-11-27T01:52:41.000Z",
  ]);
  assert.equal(events[1]!.data.sky_minus_ambient, -20);
  assert.equal(events[1]!.data.temp_unit, "C");
  assert.equal(events[1]!.data.day_cond, 1);
  assert.equal(events[1]!.data.alert, 0);
});

Deno.test("a key=value file without a time posts once per rewrite, stamped when read", async () => {
  await using dir = await tempDir();
  await using site = await tempDir();
  await using service = await testServer({ siteDir: site.path });
  const path = join(dir.path, "station.txt");
  await rewrite(path, "# davis\ntemp: 4.5\nwind: 3\nstate: ok\n", 1000);
  const tick = ticker();
  await using _ticker = tick.server;
  await using _collector = startCollector([tick.input, {
    name: "st",
    kind: "file",
    type: "station",
    path,
    format: "keyvalue",
    separator: ":",
    fields: { temp_c: "temp", state: "state" },
    every_s: 0.1,
  }], service.url);
  await waitUntil(async () => (await eventsOf(site.path, "station")).length === 1, 10_000, "first");
  const before = Date.now();
  await tick.polls(4); // four polls of an unchanged file
  assert.equal((await eventsOf(site.path, "station")).length, 1);
  await rewrite(path, "temp: 5\nwind: 3\nstate: ok\n", 1001);
  await waitUntil(
    async () => (await eventsOf(site.path, "station")).length === 2,
    10_000,
    "second",
  );
  const [, second] = await eventsOf(site.path, "station");
  assert.deepEqual(second!.data, { temp_c: 5, state: "ok" });
  assert.ok(Date.parse(second!.ts) >= before - 1000, second!.ts);
});

Deno.test("a JSON file is read with pointers and its own time; an unchanged time posts nothing", async () => {
  await using dir = await tempDir();
  await using site = await tempDir();
  await using service = await testServer({ siteDir: site.path });
  const path = join(dir.path, "now.json");
  await rewrite(path, JSON.stringify({ w: { t: 1 }, at: 1_800_000_000_000 }), 1000);
  const tick = ticker();
  await using _ticker = tick.server;
  await using _collector = startCollector([tick.input, {
    name: "j",
    kind: "file",
    type: "json",
    path,
    format: "json",
    fields: { t: "/w/t" },
    ts: "/at",
    ts_format: "unix_ms",
    every_s: 0.1,
  }], service.url);
  await waitUntil(async () => (await eventsOf(site.path, "json")).length === 1, 10_000, "first");
  await rewrite(path, JSON.stringify({ w: { t: 2 }, at: 1_800_000_000_000 }), 1001);
  await tick.polls(3); // the rewrite was read: same time, nothing posted
  assert.equal((await eventsOf(site.path, "json")).length, 1);
  await rewrite(path, JSON.stringify({ w: { t: 3 }, at: 1_800_000_001_000 }), 1002);
  await waitUntil(async () => (await eventsOf(site.path, "json")).length === 2, 10_000, "second");
  assert.deepEqual((await eventsOf(site.path, "json")).map((e) => e.data.t), [1, 3]);
});

Deno.test("a FIFO in place of the file is refused with one warning, never blocks, and the file is read again once it is back", async () => {
  await using dir = await tempDir();
  await using site = await tempDir();
  await using service = await testServer({ siteDir: site.path });
  const path = join(dir.path, "station.txt");
  const fifo = await new Deno.Command("mkfifo", { args: [path] }).output();
  assert.ok(fifo.success);
  const other = join(dir.path, "other.txt");
  await rewrite(other, "n=1\n", 1000);
  await using collector = startCollector([
    { name: "fifo", kind: "file", type: "a", path, format: "keyvalue", every_s: 0.1 },
    { name: "other", kind: "file", type: "b", path: other, format: "keyvalue", every_s: 0.1 },
  ], service.url);
  await waitUntil(() => linesWith(collector.log, "input fifo").length === 1, 10_000, "warning");
  await waitUntil(async () => (await eventsOf(site.path, "b")).length === 1, 10_000, "other read");
  await rewrite(other, "n=2\n", 1001);
  await waitUntil(async () => (await storedEvents(site.path)).length === 2, 10_000, "other on");
  const lines = linesWith(collector.log, "input fifo");
  assert.equal(lines.length, 1, JSON.stringify(collector.log));
  assert.match(lines[0]!.message, /is a FIFO, not a regular file; refused/);
  await Deno.remove(path);
  await rewrite(path, "n=3\n", 1002);
  await waitUntil(
    () => linesWith(collector.log, "input fifo (file) up").length === 1,
    20_000,
    "up",
  );
  await waitUntil(
    async () => (await storedEvents(site.path)).some((e) => e.type === "a"),
    10_000,
    "a",
  );
});
