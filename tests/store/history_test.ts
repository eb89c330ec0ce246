import assert from "node:assert/strict";
import { join } from "node:path";
import {
  DamagedFileError,
  findRunDir,
  parseTimeBound,
  readHistory,
  readHistoryLines,
  RunNotFoundError,
} from "../../history.ts";
import { compressFile } from "../../store/compress.ts";
import { openService, readLines, siteFiles, tempDir } from "../_shared/util.ts";

const HOUR = 3_600_000;

async function lines(siteDir: string, options = {}): Promise<string[]> {
  return await Array.fromAsync(readHistoryLines(siteDir, options));
}

/** Records one event per hour from `startIso`, `hours` of them, alternating weather/status. */
async function recordHours(
  siteDir: string,
  startIso: string,
  hours: number,
  timeZone = "UTC",
): Promise<void> {
  const now = { ms: Date.parse(startIso) };
  const service = await openService(siteDir, { timeZone, compressAfter: 0 }, now);
  try {
    for (let h = 0; h < hours; h++) {
      now.ms = Date.parse(startIso) + h * HOUR;
      await service.record([{ type: h % 2 ? "weather" : "status", data: { h } }]);
    }
  } finally {
    await service.close();
  }
}

Deno.test("readHistoryLines() keeps since <= ts < until and the asked types, in file order", async () => {
  await using tmp = await tempDir();
  await recordHours(tmp.path, "2026-05-10T00:00:00.000Z", 48);
  const got = await lines(tmp.path, {
    types: ["weather"],
    since: "2026-05-10T11:00:00Z",
    until: "2026-05-10T15:00:00Z",
    timeZone: "UTC",
  });
  assert.deepEqual(got.map((l) => JSON.parse(l).data.h), [11, 13]);
  // Exactly the stored bytes.
  const all =
    (await Promise.all((await siteFiles(tmp.path)).map((n) => readLines(join(tmp.path, n)))))
      .flat();
  for (const line of got) assert.ok(all.includes(line));
});

Deno.test("readHistory() reads a night's date from local noon to local noon across a DST change", async () => {
  await using tmp = await tempDir();
  const zone = "Europe/Berlin";
  // 2026-03-29 02:00 local: clocks go forward (UTC+1 -> UTC+2).
  await recordHours(tmp.path, "2026-03-28T06:00:00.000Z", 40, zone);
  const night = await Array.fromAsync(
    readHistory(tmp.path, { since: "2026-03-28", until: "2026-03-29", timeZone: zone }),
  );
  // Noon on the 28th is 11:00Z (CET); noon on the 29th is 10:00Z (CEST): 23 hours.
  assert.equal(night[0]!.ts, "2026-03-28T11:00:00.000Z");
  assert.equal(night.at(-1)!.ts, "2026-03-29T09:00:00.000Z");
  assert.equal(night.length, 23);
  const file = await readLines(join(tmp.path, "site_20260328.ndjson"));
  assert.deepEqual(night.map((e) => JSON.stringify(e)), file);
});

Deno.test("readHistory() finds an event by its caller ts when it was received in the next night", async () => {
  await using tmp = await tempDir();
  const now = { ms: Date.parse("2026-05-11T13:00:00.000Z") }; // night 20260511
  const service = await openService(tmp.path, { compressAfter: 0 }, now);
  await service.record([{ type: "weather", data: { late: true }, ts: "2026-05-11T09:30:00.000Z" }]);
  await service.close();
  assert.deepEqual(await siteFiles(tmp.path), ["site_20260511.ndjson"]);
  // Its ts lies in night 20260510, whose file does not exist: the night after is read too.
  const got = await Array.fromAsync(
    readHistory(tmp.path, {
      since: "2026-05-10",
      until: "2026-05-11",
      timeZone: "UTC",
    }),
  );
  assert.deepEqual(got.map((e) => e.data), [{ late: true }]);
});

Deno.test("readHistoryLines() does not open files of nights far outside the range", async () => {
  await using tmp = await tempDir();
  await recordHours(tmp.path, "2026-05-10T12:00:00.000Z", 3);
  // Damaged: reading it would throw.
  await Deno.writeTextFile(join(tmp.path, "site_20260501.ndjson.gz"), "not gzip at all");
  assert.equal((await lines(tmp.path, { since: "2026-05-10T00:00:00Z" })).length, 3);
  await assert.rejects(() => lines(tmp.path), DamagedFileError);
});

Deno.test("readHistoryLines() skips a torn last line and lines that are not envelopes", async () => {
  await using tmp = await tempDir();
  const good = '{"seq":1,"ts":"2026-05-10T13:00:00.000Z","type":"a","data":{},"meta":{}}';
  const odd = '{"type":"a","seq":2,"data":{},"meta":{},"ts":"2026-05-10T14:00:00.000Z"}';
  await Deno.writeTextFile(
    join(tmp.path, "site_20260510.ndjson"),
    `${good}\nnot json\n\n${odd}\n{"seq":3,"ts":"2026-05-10T15:00`,
  );
  assert.deepEqual(await lines(tmp.path), [good, odd]);
  assert.deepEqual(await lines(tmp.path, { since: "2026-05-10T13:30:00Z" }), [odd]);
  assert.deepEqual((await Array.fromAsync(readHistory(tmp.path))).map((e) => e.seq), [1, 2]);
});

Deno.test("readHistoryLines() matches a type exactly, not by prefix or inside data", async () => {
  await using tmp = await tempDir();
  const line = (seq: number, type: string, data: string) =>
    `{"seq":${seq},"ts":"2026-05-10T13:00:00.000Z","type":${
      JSON.stringify(type)
    },"data":${data},"meta":{}}`;
  const lines3 = [
    line(1, "wind", "{}"),
    line(2, "windy", "{}"),
    line(3, "other", '{"type":"wind"}'),
    line(4, 'w"q', "{}"),
  ];
  await Deno.writeTextFile(join(tmp.path, "site_20260510.ndjson"), lines3.join("\n") + "\n");
  assert.deepEqual(await lines(tmp.path, { types: ["wind"] }), [lines3[0]]);
  assert.deepEqual(await lines(tmp.path, { types: ['w"q'] }), [lines3[3]]);
});

Deno.test("readHistory() reads the same events after old nights were compressed", async () => {
  await using tmp = await tempDir();
  await recordHours(tmp.path, "2026-05-08T12:00:00.000Z", 72);
  const before = await lines(tmp.path);
  assert.equal(before.length, 72);
  await compressFile(join(tmp.path, "site_20260508.ndjson"));
  await compressFile(join(tmp.path, "site_20260509.ndjson"));
  assert.deepEqual(await siteFiles(tmp.path), ["site_20260510.ndjson"]);
  assert.deepEqual(await lines(tmp.path), before);
  const ranged = await lines(tmp.path, {
    since: "2026-05-09T20:00:00Z",
    until: "2026-05-10T14:00:00Z",
  });
  assert.equal(ranged.length, 18);
});

Deno.test("parseTimeBound() reads durations back from now, night dates and zoned ISO times", () => {
  const now = () => Date.parse("2026-05-10T12:00:00Z");
  assert.equal(parseTimeBound("90m", { now }), now() - 90 * 60_000);
  assert.equal(parseTimeBound("12h", { now }), now() - 12 * HOUR);
  assert.equal(parseTimeBound("7d", { now }), now() - 7 * 24 * HOUR);
  assert.equal(parseTimeBound("30s", { now }), now() - 30_000);
  assert.equal(
    parseTimeBound("2026-05-10", { timeZone: "America/Santiago" }),
    Date.parse("2026-05-10T16:00:00Z"),
  );
  assert.equal(parseTimeBound("2026-05-10T05:00+02:00"), Date.parse("2026-05-10T03:00:00Z"));
});

Deno.test("parseTimeBound() refuses times without a zone, impossible dates and unknown units", () => {
  for (const bad of ["2026-05-10T03:00:00", "2026-02-30", "12", "3w", "-5m", "yesterday", ""]) {
    assert.throws(
      () => parseTimeBound(bad),
      (err: Error) =>
        err instanceof RangeError &&
        err.message ===
          `Cannot read the time "${bad}": use ISO 8601 with a zone (2026-05-10T03:00:00Z), a night's date (2026-05-10) or a duration back from now (90m, 12h, 7d)`,
      bad,
    );
  }
});

Deno.test("readHistoryLines() refuses a since that is not before until", async () => {
  await using tmp = await tempDir();
  await assert.rejects(
    () => lines(tmp.path, { since: "2026-05-10T03:00:00Z", until: "2026-05-10T03:00:00Z" }),
    RangeError,
  );
});

Deno.test("readHistory() reads a run by id, found through the service's records", async () => {
  await using tmp = await tempDir();
  const now = { ms: Date.parse("2026-05-10T20:00:00.000Z") };
  const service = await openService(tmp.path, { compressAfter: 0 }, now);
  await service.record([{ type: "status", data: { before: true } }]);
  await service.startRun({ runId: "night-1" });
  await service.record([{ type: "status", data: { n: 1 } }, { type: "weather", data: { n: 2 } }]);
  // While active: found through .active-run.json.
  const active = await Array.fromAsync(readHistory(tmp.path, { run: "night-1" }));
  assert.deepEqual(active.map((e) => e.data), [{ n: 1 }, { n: 2 }]);
  await service.stopRun();
  await service.close();
  // Stopped: found as the directory of that name.
  const events = await Array.fromAsync(
    readHistory(tmp.path, { run: "night-1", types: ["weather"] }),
  );
  assert.deepEqual(events.map((e) => [e.seq, e.meta.run_id]), [[2, "night-1"]]);
  await assert.rejects(
    () => Array.fromAsync(readHistory(tmp.path, { run: "night-2" })),
    RunNotFoundError,
  );
});

Deno.test("findRunDir() takes the latest line of a run in runs.ndjson and skips a torn last line", async () => {
  await using tmp = await tempDir();
  await using elsewhere = await tempDir();
  const record = (dir: string, stopped: string | null) =>
    JSON.stringify({
      run_id: "n1",
      run_dir: dir,
      started_at: "x",
      stopped_at: stopped,
      events: 0,
      meta: {},
    });
  await Deno.writeTextFile(
    join(tmp.path, "runs.ndjson"),
    `${record("/old/place", null)}\n${
      record(elsewhere.path, "y")
    }\n{"run_id":"n1","run_dir":"/torn`,
  );
  assert.equal(await findRunDir(tmp.path, "n1"), elsewhere.path);
  await assert.rejects(() => findRunDir(tmp.path, "../etc"), RangeError);
});

Deno.test("findRunDir() does not follow a link named like the run out of the site directory", async () => {
  await using tmp = await tempDir();
  await using outside = await tempDir();
  await Deno.writeTextFile(join(outside.path, "telemetry.ndjson"), '{"seq":1}\n');
  await Deno.symlink(outside.path, join(tmp.path, "night-9"));
  await assert.rejects(() => findRunDir(tmp.path, "night-9"), RunNotFoundError);
});

Deno.test("findRunDir() does not read a run log that is a link out of the site directory", async () => {
  await using tmp = await tempDir();
  await using outside = await tempDir();
  const log = join(outside.path, "planted.ndjson");
  await Deno.writeTextFile(log, JSON.stringify({ run_id: "n1", run_dir: outside.path }) + "\n");
  await Deno.symlink(log, join(tmp.path, "runs.ndjson"));
  await Deno.symlink(log, join(tmp.path, ".active-run.json"));
  await assert.rejects(() => findRunDir(tmp.path, "n1"), RunNotFoundError);
});

Deno.test("readHistory() starts a night's date at local noon to the millisecond", async () => {
  await using tmp = await tempDir();
  const zone = "America/Santiago"; // UTC-3 in November
  const line = (seq: number, ts: string) =>
    `{"seq":${seq},"ts":"${ts}","type":"t","data":{},"meta":{}}`;
  await Deno.writeTextFile(
    join(tmp.path, "site_20261122.ndjson"),
    [
      line(1, "2026-11-23T14:59:59.999Z"), // 11:59:59.999 local on the 23rd: night of the 22nd
      line(2, "2026-11-23T15:00:00.000Z"), // 12:00 local: night of the 23rd
    ].join("\n") + "\n",
  );
  const seqs = async (options: Record<string, string>) =>
    (await Array.fromAsync(readHistory(tmp.path, { ...options, timeZone: zone }))).map((e) =>
      e.seq
    );
  assert.deepEqual(await seqs({ since: "2026-11-23" }), [2]);
  assert.deepEqual(await seqs({ since: "2026-11-22", until: "2026-11-23" }), [1]);
});
