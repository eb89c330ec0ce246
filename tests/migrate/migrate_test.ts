import assert from "node:assert/strict";
import { join } from "node:path";
import {
  legacyDateToTs,
  migrate,
  MigrateConflictError,
  MigrateError,
  type MigrateProgress,
  REJECTS_FILE,
} from "../../migrate.ts";
import { siteFileName } from "../../store/layout.ts";
import { SiteLock } from "../../store/lock.ts";
import { dayKey } from "../../store/day_key.ts";
import { CLI, readLines, readSiteLines, siteFiles, tempDir } from "../_shared/util.ts";

// --- fixtures shaped like the legacy writer's output ---------------------------------------------

/** `json.dumps` as the legacy Python writer called it: `", "` and `": "`, ASCII-only escapes. */
function pyDumps(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(pyDumps).join(", ")}]`;
  if (typeof value === "object" && value !== null) {
    const entries = Object.entries(value).filter(([, v]) => v !== undefined);
    return `{${entries.map(([k, v]) => `${pyDumps(k)}: ${pyDumps(v)}`).join(", ")}}`;
  }
  return JSON.stringify(value).replace(
    /[\u0080-\uffff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

interface LegacyRecord {
  _id?: unknown;
  type?: unknown;
  date?: unknown;
  data?: unknown;
}

function reading(i: number): Record<string, unknown> {
  return {
    temperature: `${(i % 40) / 2} deg`,
    wind: { speed_mps: (i % 17) / 10, direction: `${(i * 37) % 360} deg` },
    sky: [i % 3, { cloudy: i % 2 === 0 }],
  };
}

function legacy(date: string, options: Partial<LegacyRecord> = {}): LegacyRecord {
  return { _id: crypto.randomUUID(), type: "weather", date, data: reading(1), ...options };
}

async function writeLegacy(
  dir: string,
  rel: string,
  lines: readonly (LegacyRecord | string)[],
  eol = "\n",
): Promise<void> {
  const path = join(dir, rel);
  await Deno.mkdir(join(path, ".."), { recursive: true });
  const text = lines.map((l) => (typeof l === "string" ? l : pyDumps(l)) + eol).join("");
  await Deno.writeTextFile(path, text);
}

function idOf(line: string): unknown {
  return JSON.parse(line).meta.original_id;
}

async function sha256Hex(bytes: Uint8Array): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", bytes as Uint8Array<ArrayBuffer>);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Every entry of a directory tree with a hash of each file, for "nothing changed" checks. */
async function treeState(dir: string): Promise<string[]> {
  const out: string[] = [];
  async function walk(path: string, rel: string): Promise<void> {
    for await (const e of Deno.readDir(path)) {
      const r = rel === "" ? e.name : `${rel}/${e.name}`;
      if (e.isDirectory) {
        out.push(`${r}/`);
        await walk(join(path, e.name), r);
      } else {
        out.push(`${r} ${await sha256Hex(await Deno.readFile(join(path, e.name)))}`);
      }
    }
  }
  await walk(dir, "");
  return out.sort();
}

/** The output files (site files and rejects) with their hashes. */
async function outputState(dir: string): Promise<string[]> {
  return (await treeState(dir)).filter((e) => e.startsWith("site_") || e.startsWith(REJECTS_FILE));
}

/** A small store spanning several days, with a nested collection and a broken line. */
async function sampleStore(dir: string, days = 6, perDay = 5): Promise<void> {
  const weather: (LegacyRecord | string)[] = [];
  const dome: LegacyRecord[] = [];
  for (let d = 0; d < days; d++) {
    for (let i = 0; i < perDay; i++) {
      const day = `2026-03-${String(d + 1).padStart(2, "0")}`;
      const time = `${String(20 + (i % 4)).padStart(2, "0")}:${
        String(i * 7 % 60).padStart(2, "0")
      }`;
      weather.push(legacy(`${day}T${time}:00.${String(i * 12345).padStart(6, "0")}`, {
        data: reading(d * perDay + i),
      }));
      dome.push(legacy(`${day} ${time}:30`, { type: "dome", data: { shutter: "open °", i } }));
    }
  }
  weather.splice(3, 0, "{broken");
  await writeLegacy(dir, "weather.json", weather);
  await writeLegacy(dir, "site/dome/dome.json", dome.reverse());
}

// --- conversion ----------------------------------------------------------------------------------

Deno.test("migrate() writes each record as a live-service envelope with migration meta", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  const id = crypto.randomUUID();
  // Written by hand as Python wrote it: spaces after separators, 45.0, ASCII escapes.
  await writeLegacy(src, "weather.json", [
    `{"_id": "${id}", "type": "weather", "date": "2026-03-05T22:10:00.123456", "data": {"temperature": "12.5 \\u00b0C", "humidity": 45.0, "wind": {"speed_mps": 3.2, "direction": "270 deg"}, "sky": [0.1, {"ok": true}, null]}}`,
  ]);

  await migrate(src, dst);

  assert.equal(
    await Deno.readTextFile(join(dst, "site_20260305.ndjson")),
    `{"seq":1,"ts":"2026-03-05T22:10:00.123Z","type":"weather","data":{"temperature":"12.5 °C","humidity":45,"wind":{"speed_mps":3.2,"direction":"270 deg"},"sky":[0.1,{"ok":true},null]},"meta":{"migrated_from":"PanFileDB","original_id":"${id}"}}\n`,
  );
});

Deno.test("migrate() accepts every legacy date form and writes UTC milliseconds", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  const cases: [string, string][] = [
    ["2026-03-05T10:20:30.123456", "2026-03-05T10:20:30.123Z"],
    ["2026-03-05 10:20:31", "2026-03-05T10:20:31.000Z"],
    ["2026-03-05T10:20:32.5", "2026-03-05T10:20:32.500Z"],
    ["2026-03-05T10:20:33.98", "2026-03-05T10:20:33.980Z"],
    ["2026-03-05T10:20:34.123456789Z", "2026-03-05T10:20:34.123Z"],
    ["2026-03-05T12:20:35.1+02:00", "2026-03-05T10:20:35.100Z"],
    ["2026-03-05 05:20:36-05:00", "2026-03-05T10:20:36.000Z"],
    ["2026-03-05T10:20:37.999999+00:00", "2026-03-05T10:20:37.999Z"],
    ["2026-03-05T10:50:38+00:30", "2026-03-05T10:20:38.000Z"],
    ["2024-02-29T10:20:39", "2024-02-29T10:20:39.000Z"],
  ];
  const records = cases.map(([date]) => legacy(date));
  await writeLegacy(src, "weather.json", records);

  const summary = await migrate(src, dst);

  assert.equal(summary.rejects, 0);
  const ts = new Map<unknown, string>();
  for (const name of await siteFiles(dst)) {
    for (const line of await readLines(join(dst, name))) ts.set(idOf(line), JSON.parse(line).ts);
  }
  assert.deepEqual(
    records.map((r) => ts.get(r._id)),
    cases.map(([, expected]) => expected),
  );
});

Deno.test("migrate() sends impossible and malformed dates to the rejects file", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  const bad: [unknown, RegExp][] = [
    ["2026-02-30T00:00:00", /not a calendar date/],
    ["2023-02-29 12:00:00", /not a calendar date/],
    ["2026-13-01T00:00:00", /not a calendar date/],
    ["2026-01-01T24:00:00", /no such time of day/],
    ["2026-01-01T00:00:00+25:00", /impossible UTC offset/],
    ["2026-01-01", /is not YYYY-MM-DD/],
    ["2026-01-01T00:00:00.", /is not YYYY-MM-DD/],
    ["0001-01-01T00:30:00+01:00", /outside the years 0001 to 9999/],
    [1767225600, /"date" is a number, not a string/],
    [undefined, /record has no "date"/],
  ];
  const lines = bad.map(([date]) => pyDumps(legacy("x", { date })));
  await writeLegacy(src, "weather.json", lines);

  const summary = await migrate(src, dst);

  assert.equal(summary.records, 0);
  assert.equal(summary.rejects, bad.length);
  const rejects = (await readLines(join(dst, REJECTS_FILE))).map((l) => JSON.parse(l));
  assert.deepEqual(
    rejects.map((r) => [r.file, r.line, r.text]),
    lines.map((text, i) => ["weather.json", i + 1, text]),
  );
  rejects.forEach((r, i) => assert.match(r.reason, bad[i]![1]));
  assert.deepEqual(await siteFiles(dst), []);
});

Deno.test("migrate() groups by the written calendar date and sorts each day by ts, seq going on across days", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  const late = legacy("2026-03-05T23:59:59.999");
  const afterMidnight = legacy("2026-03-06T00:00:00.000");
  const evening = legacy("2026-03-05T21:00:00");
  const tieA = legacy("2026-03-05T22:00:00");
  const tieB = legacy("2026-03-05T22:00:00.000Z", { type: "dome" });
  // Written on the 5th in New York, already the 6th in UTC: stays in the 5th's file, sorted last.
  const zoned = legacy("2026-03-05T23:30:00-05:00");
  await writeLegacy(src, "a.json", [late, afterMidnight, zoned, evening, tieA]);
  await writeLegacy(src, "b.json", [tieB]);

  const summary = await migrate(src, dst);

  assert.deepEqual(summary.files.map((f) => [f.name, f.lines]), [
    ["site_20260305.ndjson", 5],
    ["site_20260306.ndjson", 1],
  ]);
  const day5 = (await readLines(join(dst, "site_20260305.ndjson"))).map((l) => JSON.parse(l));
  assert.deepEqual(day5.map((e) => e.meta.original_id), [
    evening._id,
    tieA._id,
    tieB._id,
    late._id,
    zoned._id,
  ]);
  assert.deepEqual(day5.map((e) => e.seq), [1, 2, 3, 4, 5]);
  assert.equal(day5[4].ts, "2026-03-06T04:30:00.000Z");
  const day6 = (await readLines(join(dst, "site_20260306.ndjson"))).map((l) => JSON.parse(l));
  assert.deepEqual(day6.map((e) => [e.seq, e.meta.original_id]), [[6, afterMidnight._id]]);
});

Deno.test("migrate() finds collections in nested subdirectories and ignores current_*.json", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  const snapshot = legacy("2026-03-05T10:00:00");
  await writeLegacy(src, "weather.json", [legacy("2026-03-05T10:00:00")]);
  await writeLegacy(src, "current_weather.json", [snapshot]);
  await writeLegacy(src, "obs/2026/dome/dome.json", [
    legacy("2026-03-05T11:00:00", { type: "dome" }),
    legacy("2026-03-05T12:00:00", { type: "dome" }),
  ]);
  await writeLegacy(src, "obs/current_dome.json", [legacy("2026-03-05T13:00:00")]);
  await Deno.writeTextFile(join(src, "notes.txt"), "not a collection\n");

  const summary = await migrate(src, dst);

  assert.deepEqual(summary.collections, { dome: 2, weather: 1 });
  assert.deepEqual(summary.inputs.map((i) => i.path), ["obs/2026/dome/dome.json", "weather.json"]);
  assert.deepEqual(summary.skipped.map((s) => s.path), [
    "current_weather.json",
    "obs/current_dome.json",
  ]);
  const ids = (await readLines(join(dst, "site_20260305.ndjson"))).map(idOf);
  assert.equal(ids.length, 3);
  assert.ok(!ids.includes(snapshot._id));
});

Deno.test("migrate() rejects broken lines verbatim and counts blank lines separately", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  const good = legacy("2026-03-05T10:00:00");
  const good2 = legacy("2026-03-05T10:00:01");
  await Deno.mkdir(src);
  await Deno.writeTextFile(
    join(src, "weather.json"),
    [
      pyDumps(good),
      "{not json",
      "",
      "   \t",
      "[1, 2]",
      "42",
      '{"_id": "nan", "type": "weather", "date": "2026-03-05T10:00:00", "data": {"t": NaN}}',
      pyDumps(good2),
      '{"_id": "torn", "type": "wea', // torn tail: no final newline
    ].join("\n"),
  );

  const summary = await migrate(src, dst);

  assert.equal(summary.records, 2);
  assert.equal(summary.blankLines, 2);
  assert.equal(summary.rejects, 5);
  assert.deepEqual(summary.inputs[0], {
    path: "weather.json",
    collection: "weather",
    bytes: (await Deno.stat(join(src, "weather.json"))).size,
    lines: 9,
    records: 2,
    rejects: 5,
    blankLines: 2,
  });
  const rejects = (await readLines(join(dst, REJECTS_FILE))).map((l) => JSON.parse(l));
  assert.deepEqual(rejects.map((r) => [r.line, r.text]), [
    [2, "{not json"],
    [5, "[1, 2]"],
    [6, "42"],
    [7, '{"_id": "nan", "type": "weather", "date": "2026-03-05T10:00:00", "data": {"t": NaN}}'],
    [9, '{"_id": "torn", "type": "wea'],
  ]);
  assert.match(rejects[0].reason, /^line is not valid JSON/);
  assert.equal(rejects[1].reason, "record is an array, not a JSON object");
  assert.equal(rejects[2].reason, "record is a number, not a JSON object");
  assert.deepEqual((await readLines(join(dst, "site_20260305.ndjson"))).map(idOf), [
    good._id,
    good2._id,
  ]);
});

Deno.test("migrate() wraps non-object data as value and falls back to the collection name for type", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  const records: LegacyRecord[] = [
    { _id: "a", type: "temp", date: "2026-03-05T10:00:01", data: 21.5 },
    { _id: "b", type: "temp", date: "2026-03-05T10:00:02", data: "12.5 deg" },
    { _id: "c", type: "temp", date: "2026-03-05T10:00:03", data: [1, "2 deg"] },
    { _id: "d", type: "temp", date: "2026-03-05T10:00:04", data: null },
    { _id: "e", date: "2026-03-05T10:00:05", data: { ok: true } },
    { _id: "f", type: null, date: "2026-03-05T10:00:06" },
    { type: "temp", date: "2026-03-05T10:00:07", data: {} },
  ];
  await writeLegacy(src, "environment.json", records);

  await migrate(src, dst);

  const events = (await readLines(join(dst, "site_20260305.ndjson"))).map((l) => JSON.parse(l));
  assert.deepEqual(events.map((e) => [e.type, e.data, e.meta.original_id]), [
    ["temp", { value: 21.5 }, "a"],
    ["temp", { value: "12.5 deg" }, "b"],
    ["temp", { value: [1, "2 deg"] }, "c"],
    ["temp", { value: null }, "d"],
    ["environment", { ok: true }, "e"],
    ["environment", {}, "f"],
    ["temp", {}, null],
  ]);
});

Deno.test("migrate() rejects records whose type the service would refuse", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await writeLegacy(src, "weather.json", [
    legacy("2026-03-05T10:00:00", { type: 42 }),
    legacy("2026-03-05T10:00:00", { type: "" }),
    legacy("2026-03-05T10:00:00", { type: "bad\u0007type" }),
    legacy("2026-03-05T10:00:00", { type: "x".repeat(129) }),
  ]);

  const summary = await migrate(src, dst);

  assert.equal(summary.records, 0);
  const reasons = (await readLines(join(dst, REJECTS_FILE))).map((l) => JSON.parse(l).reason);
  assert.deepEqual(reasons, [
    `"type" is a number, not a string`,
    `"type" cannot be used: "type" must be 1 to 128 characters long; it has 0.`,
    `"type" cannot be used: "type" contains a control character; use printable characters only.`,
    `"type" cannot be used: "type" must be 1 to 128 characters long; it has 129.`,
  ]);
});

Deno.test("legacyDateToTs() throws SyntaxError for a malformed date and RangeError for an impossible one", () => {
  assert.equal(legacyDateToTs("2026-03-05 22:10:00.1234"), "2026-03-05T22:10:00.123Z");
  assert.throws(() => legacyDateToTs("05/03/2026 22:10"), SyntaxError);
  assert.throws(() => legacyDateToTs("2026-02-30T00:00:00"), {
    name: "RangeError",
    message: 'Cannot convert legacy date "2026-02-30T00:00:00" is not a calendar date',
  });
});

// --- safety --------------------------------------------------------------------------------------

Deno.test("migrate() refuses to run again without force, lists every target and writes nothing", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await sampleStore(src, 3);
  const first = await migrate(src, dst);
  const before = await treeState(dst);

  const err = await migrate(src, dst).then(
    () => assert.fail("the second run should have failed"),
    (e: unknown) => e,
  );

  assert.ok(err instanceof MigrateConflictError);
  assert.deepEqual(err.files, [first.rejectsFile, ...first.files.map((f) => f.path)].sort());
  assert.match(err.message, /already exist .*--force/);
  assert.deepEqual(await treeState(dst), before);
});

Deno.test("migrate() refuses when one target site file exists and removes its scratch space", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await sampleStore(src, 3);
  await Deno.mkdir(dst);
  await Deno.writeTextFile(join(dst, "site_20260302.ndjson"), "live data\n");
  await Deno.writeTextFile(join(dst, "site_20260401.ndjson"), "another day\n");
  const before = await treeState(dst);

  await assert.rejects(
    () => migrate(src, dst),
    (err: unknown) =>
      err instanceof MigrateConflictError &&
      err.files.length === 1 && err.files[0] === join(dst, "site_20260302.ndjson"),
  );
  // Only the site lock, which a telemetry server would create too, is new.
  assert.deepEqual((await treeState(dst)).filter((e) => !e.startsWith(".lock ")), before);
});

Deno.test("migrate() with force replaces existing targets and reports them", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site"), ref = join(tmp.path, "ref");
  await sampleStore(src, 3);
  await migrate(src, ref);
  await Deno.mkdir(dst);
  // A line of an earlier migration of another version of the store.
  await Deno.writeTextFile(
    join(dst, "site_20260302.ndjson"),
    `{"seq":7,"ts":"2026-03-02T20:00:00.000Z","type":"weather","data":{},"meta":{"migrated_from":"PanFileDB","original_id":"old"}}\n`,
  );
  await Deno.writeTextFile(join(dst, REJECTS_FILE), "stale\n");

  const summary = await migrate(src, dst, { force: true });

  assert.deepEqual(summary.replaced, [join(dst, REJECTS_FILE), join(dst, "site_20260302.ndjson")]);
  // The reference's lines, numbered after the seq the replaced line had (docs/migration.md).
  const shifted = (await readSiteLines(ref)).map((l) =>
    l.replace(/^\{"seq":(\d+),/, (_, seq) => `{"seq":${Number(seq) + 7},`)
  );
  assert.deepEqual(await readSiteLines(dst), shifted);
  assert.equal(
    await Deno.readTextFile(join(dst, REJECTS_FILE)),
    await Deno.readTextFile(join(ref, REJECTS_FILE)),
  );
});

Deno.test("migrate() in a dry run reports the same files as a real run and writes nothing", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await sampleStore(src);
  const sourceBefore = await treeState(src);

  const dry = await migrate(src, dst, { dryRun: true });

  await assert.rejects(() => Deno.stat(dst), Deno.errors.NotFound);
  assert.deepEqual(await treeState(src), sourceBefore);
  const real = await migrate(src, dst);
  assert.equal(dry.dryRun, true);
  assert.deepEqual(dry.files, real.files);
  assert.deepEqual(
    [dry.records, dry.rejects, dry.blankLines, dry.collections],
    [real.records, real.rejects, real.blankLines, real.collections],
  );
});

Deno.test("migrate() output is byte-identical across runs, chunk sizes and buffer sizes", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy");
  await sampleStore(src, 12, 20);
  // Raw UTF-8 and CRLF line ends, so tiny chunks split characters and line ends.
  await writeLegacy(
    src,
    "notes/log.json",
    [
      legacy("2026-03-02T01:00:00", { data: { text: "Cúpula abierta ° ✓ 🌙" } }),
      '"a string record, rejected: ümlaut"',
      legacy("2026-03-09T01:00:00", { type: "dome" }),
    ],
    "\r\n",
  );
  // Python wrote ASCII escapes, but a hand-edited file may hold raw UTF-8 in a record or a reject.
  await Deno.writeTextFile(
    join(src, "notes/raw.json"),
    `{"_id": "r1", "type": "note", "date": "2026-03-03 02:00:00", "data": {"t": "señal 🌙"}}\n`,
  );

  const a = join(tmp.path, "a"), b = join(tmp.path, "b"), c = join(tmp.path, "c");
  await migrate(src, a);
  await migrate(src, b);
  await migrate(src, c, { chunkBytes: 7, bufferBytes: 64 });

  const state = await outputState(a);
  assert.ok(state.length > 12);
  assert.deepEqual(await outputState(b), state);
  assert.deepEqual(await outputState(c), state);
  const notes = (await readLines(join(a, "site_20260303.ndjson"))).map((l) => JSON.parse(l));
  assert.deepEqual(notes.find((e) => e.meta.original_id === "r1").data, { t: "señal 🌙" });
  const rejects = (await readLines(join(a, REJECTS_FILE))).map((l) => JSON.parse(l).text);
  assert.ok(rejects.includes('"a string record, rejected: ümlaut"'), `${rejects}`);
});

Deno.test("migrate() throws MigrateError when the source is missing", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "nope");
  await assert.rejects(() => migrate(src, join(tmp.path, "site")), {
    name: "MigrateError",
    message:
      `Cannot migrate from "${src}": no such directory, pass the legacy database directory with --source`,
  });
  await assert.rejects(() => Deno.stat(join(tmp.path, "site")), Deno.errors.NotFound);
});

Deno.test("migrate() throws MigrateError when the source is a file", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "weather.json");
  await Deno.writeTextFile(src, "");
  await assert.rejects(() => migrate(src, join(tmp.path, "site")), (err: unknown) => {
    assert.ok(err instanceof MigrateError);
    assert.match(err.message, /it is a file, not a directory/);
    return true;
  });
});

Deno.test("migrate() refuses a destination whose site lock a telemetry server holds", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await sampleStore(src, 1);
  await Deno.mkdir(dst);
  const lock = await SiteLock.acquire(dst);
  try {
    await assert.rejects(() => migrate(src, dst), (err: unknown) => {
      assert.ok(err instanceof MigrateError);
      assert.match(err.message, /a telemetry server or another migration is using it/);
      return true;
    });
    assert.deepEqual(await siteFiles(dst), []);
  } finally {
    await lock.release();
  }
});

Deno.test("migrate() reports progress in phase order up to the totals", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await sampleStore(src, 4);
  const seen: MigrateProgress[] = [];

  const summary = await migrate(src, dst, { chunkBytes: 512, onProgress: (p) => seen.push(p) });

  const phases = [...new Set(seen.map((p) => p.phase))];
  assert.deepEqual(phases, ["read", "write", "commit"]);
  const lastRead = seen.filter((p) => p.phase === "read").at(-1)!;
  assert.equal(lastRead.bytesRead, lastRead.totalBytes);
  assert.equal(lastRead.records, summary.records);
  assert.deepEqual(
    seen.filter((p) => p.phase === "write").map((p) => `${p.filesDone}/${p.filesTotal}`),
    ["1/4", "2/4", "3/4", "4/4"],
  );
  assert.deepEqual(seen.at(-1), { ...seen.at(-1), phase: "commit", filesDone: 5, filesTotal: 5 });
});

// --- merging collections by date ----------------------------------------------------------------

/** Collections by path relative to the source, each a list of records in file order. */
type Store = Record<string, LegacyRecord[]>;

async function writeStore(dir: string, store: Store): Promise<void> {
  for (const [rel, records] of Object.entries(store)) await writeLegacy(dir, rel, records);
}

/**
 * What docs/migration.md asks for, computed the slow way: every record in the file of its written date,
 * sorted by ts, ties in sorted path order, then line order. Site file name to original ids.
 */
function expectedDays(store: Store): Map<string, unknown[]> {
  const all = Object.keys(store).sort().flatMap((rel, file) =>
    store[rel]!.map((r, line) => ({ r, file, line, ts: legacyDateToTs(r.date as string) }))
  );
  all.sort((a, b) => (a.ts < b.ts ? -1 : a.ts > b.ts ? 1 : a.file - b.file || a.line - b.line));
  const days = new Map<string, unknown[]>();
  for (const { r } of all) {
    const name = `site_${(r.date as string).slice(0, 10).replaceAll("-", "")}.ndjson`;
    days.set(name, [...(days.get(name) ?? []), r._id]);
  }
  return days;
}

/**
 * Every site file in `dir` with its original ids, checking that seq runs 1..n across the files in
 * night order (docs/migration.md).
 */
async function actualDays(dir: string): Promise<Map<string, unknown[]>> {
  const days = new Map<string, unknown[]>();
  let seq = 0;
  for (const name of await siteFiles(dir)) {
    const events = (await readLines(join(dir, name))).map((l) => JSON.parse(l));
    assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => seq + i + 1), name);
    seq += events.length;
    days.set(name, events.map((e) => e.meta.original_id));
  }
  return days;
}

/** `count` records a `stepMinutes` apart from `start` (UTC, written without a zone). */
function series(
  start: string,
  count: number,
  stepMinutes: number,
  type = "weather",
): LegacyRecord[] {
  const t0 = Date.parse(`${start}Z`);
  return Array.from({ length: count }, (_, i) => {
    const iso = new Date(t0 + i * stepMinutes * 60_000).toISOString();
    return legacy(iso.slice(0, 23), { type });
  });
}

Deno.test("migrate() merges in-order collections into days sorted by ts, ties in path order", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  // Identical timestamps in every collection, across several days and read chunks.
  const store: Store = {
    "weather.json": series("2026-03-01T00:00:00", 300, 37),
    "dome/dome.json": series("2026-03-01T00:00:00", 300, 37, "dome"),
    "dome/a.json": series("2026-03-01T00:00:00", 150, 74, "a"),
    "status.json": series("2026-03-02T12:00:00", 100, 5, "status"),
  };
  await writeStore(src, store);

  const summary = await migrate(src, dst, { chunkBytes: 1000 });

  assert.deepEqual(await actualDays(dst), expectedDays(store));
  assert.equal(summary.records, 850);
});

Deno.test("migrate() puts records whose dates go back in a collection in their day in ts order", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  const weather = series("2026-03-01T00:00:00", 200, 45);
  // Back to the first day, already complete when the merge reaches them, and a tie in ts.
  weather.push(legacy("2026-03-01T06:00:00"), legacy("2026-03-01T00:00:00.000"));
  weather.push(...series("2026-03-08T00:00:00", 20, 45));
  const store: Store = { "weather.json": weather, "z.json": series("2026-03-01T00:00:00", 50, 90) };
  await writeStore(src, store);

  const summary = await migrate(src, dst, { chunkBytes: 4096 });

  assert.deepEqual(await actualDays(dst), expectedDays(store));
  assert.equal(summary.records, 272);
  assert.deepEqual(summary.inputs.map((i) => [i.path, i.records]), [
    ["weather.json", 222],
    ["z.json", 50],
  ]);
});

Deno.test("migrate() puts a collection that starts before an earlier one ends in its days", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  const late = series("2026-03-01T00:00:00", 100, 60);
  late.push(legacy("2026-03-01T03:00:00"));
  const store: Store = {
    "a.json": series("2026-03-03T00:00:00", 100, 60),
    "b.json": late,
    "c.json": series("2026-02-27T00:00:00", 100, 60),
  };
  await writeStore(src, store);

  await migrate(src, dst);

  assert.deepEqual(await actualDays(dst), expectedDays(store));
});

Deno.test("migrate() orders a store with more collections than it merges at once the same way", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  const store: Store = {};
  for (let i = 0; i < 70; i++) {
    store[`site${i % 4}/c${i}/c${i}.json`] = series("2026-03-01T00:00:00", 6, 360 + i % 3 * 60);
  }
  await writeStore(src, store);

  const summary = await migrate(src, dst);

  assert.deepEqual(await actualDays(dst), expectedDays(store));
  assert.equal(summary.inputs.length, 70);
});

Deno.test("migrate() keeps each collection's rejects together in path order while merging", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  const lines = (name: string) => [
    ...series("2026-03-01T00:00:00", 40, 60).map((r) => pyDumps(r)),
    `{broken ${name} 41`,
    ...series("2026-03-03T00:00:00", 40, 60).map((r) => pyDumps(r)),
    `{broken ${name} 82`,
  ];
  await writeLegacy(src, "b.json", lines("b"));
  await writeLegacy(src, "a/a.json", lines("a"));

  const summary = await migrate(src, dst, { chunkBytes: 500, bufferBytes: 100 });

  const rejects = (await readLines(join(dst, REJECTS_FILE))).map((l) => JSON.parse(l));
  assert.deepEqual(rejects.map((r) => [r.file, r.line, r.text]), [
    ["a/a.json", 41, "{broken a 41"],
    ["a/a.json", 82, "{broken a 82"],
    ["b.json", 41, "{broken b 41"],
    ["b.json", 82, "{broken b 82"],
  ]);
  assert.equal(summary.rejects, 4);
  assert.deepEqual(await treeState(dst).then((t) => t.filter((e) => e.includes(".part"))), []);
});

Deno.test("migrate() reports reading, then each site file, then the commit while merging", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await writeStore(src, {
    "a.json": series("2026-03-01T00:00:00", 100, 60),
    "b.json": series("2026-03-01T00:00:00", 100, 60),
  });
  const seen: MigrateProgress[] = [];

  await migrate(src, dst, { chunkBytes: 2048, onProgress: (p) => seen.push(p) });

  const reads = seen.filter((p) => p.phase === "read");
  assert.ok(reads.every((p, i) => i === 0 || p.bytesRead >= reads[i - 1]!.bytesRead));
  assert.equal(reads.at(-1)!.bytesRead, reads.at(-1)!.totalBytes);
  assert.deepEqual(
    seen.filter((p) => p.phase !== "read").map((p) => `${p.phase} ${p.filesDone}/${p.filesTotal}`),
    ["write 1/5", "write 2/5", "write 3/5", "write 4/5", "write 5/5"]
      .concat(["commit 1/6", "commit 2/6", "commit 3/6", "commit 4/6", "commit 5/6", "commit 6/6"]),
  );
});

Deno.test("migrate() aborted while merging throws the reason and leaves no output", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await writeStore(src, { "a.json": series("2026-03-01T00:00:00", 400, 30) });
  const controller = new AbortController();
  const reason = new Error("stop");

  await assert.rejects(
    () =>
      migrate(src, dst, {
        chunkBytes: 1024,
        signal: controller.signal,
        onProgress: (p) => {
          if (p.bytesRead > p.totalBytes / 2) controller.abort(reason);
        },
      }),
    (err) => err === reason,
  );

  assert.deepEqual((await treeState(dst)).filter((e) => !e.startsWith(".lock ")), []);
});

// --- interruption --------------------------------------------------------------------------------

Deno.test("migrate() killed mid-commit leaves each site file absent or complete", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site"), ref = join(tmp.path, "ref");
  await sampleStore(src, 20, 50);
  await migrate(src, ref);
  const reference = await outputState(ref);
  const committed = reference.filter((e) => e.startsWith("site_")).slice(0, 3);

  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      join(import.meta.dirname!, "../_shared/migrate_child.ts"),
      src,
      dst,
      "commit:3",
    ],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let output = "";
  const decoder = new TextDecoder();
  const reader = child.stdout.getReader();
  while (!output.includes("PAUSED\n")) {
    const { value, done } = await reader.read();
    if (done) break;
    output += decoder.decode(value, { stream: true });
  }
  child.kill("SIGKILL");
  const status = await child.status;
  reader.releaseLock();
  await child.stdout.cancel();
  const stderr = decoder.decode(await new Response(child.stderr).arrayBuffer());
  assert.ok(output.includes("PAUSED\n"), `the child never paused: ${output}${stderr}`);
  assert.equal(status.signal, "SIGKILL");

  // Three files were renamed into place, each one whole; the rest only exist in the scratch
  // directory, which holds nothing else.
  const state = await treeState(dst);
  const outputs = state.filter((e) => e.startsWith("site_") || e.startsWith(REJECTS_FILE));
  assert.deepEqual(outputs, committed);
  const others = state.filter((e) => !outputs.includes(e) && !e.startsWith(".lock "));
  assert.ok(others.length > 0 && others.every((e) => e.startsWith(".migrate-tmp-")), `${others}`);

  const again = await migrate(src, dst, { force: true });
  assert.deepEqual(again.replaced, committed.map((e) => join(dst, e.split(" ")[0]!)));
  // The three nights committed came out the same and keep their seqs; the others go on after
  // them (docs/migration.md): the output is the reference's, byte for byte, and as the
  // destination held no site stream besides the migration's nights, no seq mark is written.
  assert.deepEqual(await outputState(dst), reference);
  await assert.rejects(() => Deno.stat(join(dst, ".seq-mark.json")), Deno.errors.NotFound);
});

// --- issue 14 item 6: dry run, empty source, OS permissions, a clean destination -------------

const decoder = new TextDecoder();

/**
 * Runs `obs-utils telemetry migrate` in a subprocess. With `asUser` (root only) it runs as that
 * user from `program`, a copy of the program that user can read: the clone itself may lie under a
 * directory only root may enter (a `mktemp -d` parent is 0700).
 */
async function migrateCli(
  args: string[],
  asUser?: { user: string; program: string },
): Promise<{ code: number; stdout: string; stderr: string }> {
  const cli = asUser === undefined ? CLI : join(asUser.program, "cli.ts");
  const deno = [Deno.execPath(), "run", "--allow-all", cli, "telemetry", "migrate", ...args];
  let command: Deno.Command;
  if (asUser === undefined) {
    command = new Deno.Command(deno[0]!, { args: deno.slice(1), stdout: "piped", stderr: "piped" });
  } else {
    const denoDir = join(asUser.program, ".deno");
    await Deno.mkdir(denoDir, { mode: 0o777 });
    await Deno.chmod(denoDir, 0o777);
    command = new Deno.Command("runuser", {
      args: ["-u", asUser.user, "--", "env", `DENO_DIR=${denoDir}`, ...deno],
      stdout: "piped",
      stderr: "piped",
    });
  }
  const out = await command.output();
  return { code: out.code, stdout: decoder.decode(out.stdout), stderr: decoder.decode(out.stderr) };
}

/** Copies the program (entry points, folders, deno.json) to `dir`, readable by every user. */
async function copyProgram(dir: string): Promise<string> {
  const root = join(import.meta.dirname!, "../..");
  async function copy(from: string, to: string): Promise<void> {
    await Deno.mkdir(to, { mode: 0o755 });
    await Deno.chmod(to, 0o755);
    for await (const entry of Deno.readDir(from)) {
      const source = join(from, entry.name), target = join(to, entry.name);
      if (entry.isDirectory) await copy(source, target);
      else if (entry.isFile) {
        await Deno.copyFile(source, target);
        await Deno.chmod(target, 0o644);
      }
    }
  }
  await Deno.mkdir(dir, { mode: 0o755 });
  await Deno.chmod(dir, 0o755);
  for await (const entry of Deno.readDir(root)) {
    const source = join(root, entry.name);
    if (entry.isFile && (entry.name.endsWith(".ts") || entry.name === "deno.json")) {
      await Deno.copyFile(source, join(dir, entry.name));
      await Deno.chmod(join(dir, entry.name), 0o644);
    } else if (entry.isDirectory && !entry.name.startsWith(".") && /^[a-z]+$/.test(entry.name)) {
      if (
        ["tests", "bench", "docs", "scripts", "deploy", "examples", "telemetry", "dist"].includes(
          entry.name,
        )
      ) continue;
      await copy(source, join(dir, entry.name));
    }
  }
  return dir;
}

Deno.test("obs-utils telemetry migrate --dry-run lists would-be conflicts and rejects, exits 0 and writes nothing", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await sampleStore(src, 3);
  await migrate(src, dst);
  await Deno.remove(join(dst, "site_20260302.ndjson"));
  const before = await treeState(dst);

  const r = await migrateCli(["--source", src, "--dest", dst, "--dry-run"]);

  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stderr, "");
  assert.match(r.stdout, /^would migrate 30 records from 2 collections into 3 site files/);
  assert.match(
    r.stdout,
    new RegExp(
      `\\n  conflicts: 3 files already exist; a real run refuses unless --force:\\n    ${
        join(dst, REJECTS_FILE)
      }\\n    ${join(dst, "site_20260301.ndjson")}\\n    ${join(dst, "site_20260303.ndjson")}\\n`,
    ),
  );
  assert.match(
    r.stdout,
    /\n {2}rejects: 1; blank lines: 0\n {4}weather\.json:4: line is not valid JSON: /,
  );
  assert.deepEqual(await treeState(dst), before);
});

Deno.test("migrate() in a dry run reports conflicts instead of throwing, and replaced ones with force", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await sampleStore(src, 2);
  await Deno.mkdir(dst);
  await Deno.writeTextFile(join(dst, "site_20260302.ndjson"), "live data\n");
  const before = await treeState(dst);

  const dry = await migrate(src, dst, { dryRun: true });
  assert.deepEqual(dry.conflicts, [join(dst, "site_20260302.ndjson")]);
  assert.deepEqual(dry.replaced, []);
  assert.deepEqual(dry.rejectSamples.map((r) => [r.file, r.line]), [["weather.json", 4]]);
  const forced = await migrate(src, dst, { dryRun: true, force: true });
  assert.deepEqual(forced.conflicts, []);
  assert.deepEqual(forced.replaced, [join(dst, "site_20260302.ndjson")]);
  assert.deepEqual(await treeState(dst), before);
});

Deno.test("migrate() keeps at most the first 20 rejects as samples, in reading order", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  const lines: (LegacyRecord | string)[] = [];
  for (let i = 0; i < 50; i++) {
    lines.push(i % 2 === 0 ? `{bad ${i}` : legacy("2026-03-01T10:00:00"));
  }
  await writeLegacy(src, "w.json", lines);
  const dry = await migrate(src, dst, { dryRun: true });
  assert.equal(dry.rejects, 25);
  assert.deepEqual(
    dry.rejectSamples.map((r) => r.line),
    Array.from({ length: 20 }, (_, i) => 2 * i + 1),
  );
  const r = await migrateCli(["--source", src, "--dest", dst, "--dry-run"]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /\n {4}w\.json:39: line is not valid JSON: .*\n {4}\.\.\. and 5 more\n$/);
});

Deno.test("obs-utils telemetry migrate exits 1 when the source holds no collection files", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await Deno.mkdir(join(src, "empty", "deeper"), { recursive: true });
  await Deno.writeTextFile(join(src, "notes.txt"), "not a collection\n");
  const r = await migrateCli(["--source", src, "--dest", dst]);
  assert.equal(r.code, 1);
  assert.equal(
    r.stderr,
    `error: Cannot migrate from "${src}": it holds no collection files (<collection>.json, searched recursively); pass the legacy database directory with --source\n`,
  );
  await assert.rejects(() => Deno.stat(dst), Deno.errors.NotFound);
  // Only snapshots: say what was skipped, so the operator sees why.
  await Deno.writeTextFile(join(src, "current_weather.json"), "{}\n");
  await assert.rejects(() => migrate(src, dst, { dryRun: true }), {
    name: "MigrateError",
    message:
      `Cannot migrate from "${src}": it holds no collection files (<collection>.json, searched recursively) (skipped 1: current_weather.json, legacy snapshot file (current_*.json), ignored); pass the legacy database directory with --source`,
  });
});

Deno.test("migrate() leaves nothing but its output files, so a rerun without force changes nothing", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await sampleStore(src, 3);
  const first = await migrateCli(["--source", src, "--dest", dst]);
  assert.equal(first.code, 0, first.stderr);
  const after = await treeState(dst);
  // No lock file, no scratch directory: exactly the site files and the rejects file.
  assert.deepEqual(after, await outputState(dst));
  assert.deepEqual(after.map((e) => e.split(" ")[0]), [
    REJECTS_FILE,
    "site_20260301.ndjson",
    "site_20260302.ndjson",
    "site_20260303.ndjson",
  ]);
  const again = await migrateCli(["--source", src, "--dest", dst]);
  assert.equal(again.code, 1);
  assert.match(again.stderr, /^error: Cannot migrate into .*4 target files already exist/);
  assert.deepEqual(await treeState(dst), after);
});

Deno.test("migrate() keeps a .lock that was in the destination before, and a server's lock still refuses it", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await sampleStore(src, 1);
  await Deno.mkdir(dst);
  await Deno.writeTextFile(join(dst, ".lock"), "4242\n");
  await migrate(src, dst);
  assert.equal(await Deno.readTextFile(join(dst, ".lock")), `${Deno.pid}\n`);
  // A migration that removed its own lock file does not let two holders in at once.
  const dst2 = join(tmp.path, "site2");
  const runs = await Promise.allSettled([migrate(src, dst2), migrate(src, dst2)]);
  assert.equal(runs.filter((r) => r.status === "fulfilled").length >= 1, true);
  for (const r of runs) {
    if (r.status === "rejected") assert.ok(r.reason instanceof MigrateError, String(r.reason));
  }
  assert.deepEqual((await treeState(dst2)).map((e) => e.split(" ")[0]), [
    REJECTS_FILE,
    "site_20260301.ndjson",
  ]);
});

const asUser = Deno.uid() === 0 ? "nobody" : undefined;
const cannotDropPrivileges = (() => {
  if (asUser === undefined) return undefined;
  try {
    const ok = new Deno.Command("runuser", { args: ["-u", "nobody", "--", "true"] }).outputSync();
    return ok.success ? undefined : "runuser -u nobody failed";
  } catch {
    return "runuser is not installed (apt-get install -y util-linux)";
  }
})();
if (cannotDropPrivileges) {
  // deno-lint-ignore no-console
  console.log(`skipping the OS permission test of migrate: ${cannotDropPrivileges}`);
}

Deno.test({
  name:
    "obs-utils telemetry migrate blames the operating system, not Deno flags, for a directory it may not write",
  ignore: cannotDropPrivileges !== undefined,
  async fn() {
    await using tmp = await tempDir();
    const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
    await sampleStore(src, 1);
    await Deno.mkdir(dst);
    // Readable by everyone, writable by nobody but its owner (root, when the test runs as root).
    for (const dir of [tmp.path, src, join(src, "site"), join(src, "site", "dome")]) {
      await Deno.chmod(dir, 0o755);
    }
    for (const f of ["weather.json", "site/dome/dome.json"]) await Deno.chmod(join(src, f), 0o644);
    await Deno.chmod(dst, 0o555);
    const program = await copyProgram(join(tmp.path, "program"));
    const r = await migrateCli(["--source", src, "--dest", dst], { user: asUser!, program });
    await Deno.chmod(dst, 0o755);
    assert.equal(r.code, 1);
    assert.equal(r.stderr.trimEnd().split("\n").length, 1, r.stderr);
    assert.match(
      r.stderr,
      new RegExp(
        `^error: Cannot write "${dst}": the operating system denied access \\(Permission denied`,
      ),
    );
    assert.doesNotMatch(r.stderr, /--allow-/);
    assert.deepEqual(await treeState(dst), []);
  },
});

Deno.test("migrate() without a Deno permission still names the flag to add", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await sampleStore(src, 1);
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      `--allow-read=${src},${dst}`,
      CLI,
      "telemetry",
      "migrate",
      "--source",
      src,
      "--dest",
      dst,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 1);
  assert.match(decoder.decode(out.stderr), /permission denied, add --allow-write=/);
});

// --- docs/history.md: --group-by night -----------------------------------------------------------

Deno.test("migrate() --group-by night puts records in the local-noon night of their ts", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  // America/Santiago is UTC-3 in March 2026: local noon is 15:00Z.
  await writeLegacy(src, "weather.json", [
    legacy("2026-03-05T14:59:59.999Z", { _id: "before-noon" }),
    legacy("2026-03-05T15:00:00.000Z", { _id: "at-noon" }),
    legacy("2026-03-06 02:30:00", { _id: "after-midnight" }), // 23:30 local on the 5th
    legacy("2026-03-05T11:59:00-03:00", { _id: "offset" }),
  ]);
  const byDate = await migrate(src, join(tmp.path, "by-date"), { dryRun: true });
  assert.deepEqual(byDate.files.map((f) => f.name), [
    "site_20260305.ndjson",
    "site_20260306.ndjson",
  ]);

  const summary = await migrate(src, dst, { groupBy: "night", timeZone: "America/Santiago" });
  assert.equal(summary.groupBy, "night");
  assert.deepEqual(summary.files.map((f) => [f.name, f.lines]), [
    ["site_20260304.ndjson", 2],
    ["site_20260305.ndjson", 2],
  ]);
  assert.deepEqual((await readLines(join(dst, "site_20260304.ndjson"))).map(idOf), [
    "offset",
    "before-noon",
  ]);
  assert.deepEqual((await readLines(join(dst, "site_20260305.ndjson"))).map(idOf), [
    "at-noon",
    "after-midnight",
  ]);
});

Deno.test("migrate() --group-by night agrees with the live service's night on DST days (seeded)", async () => {
  await using tmp = await tempDir();
  const zone = "America/Santiago";
  // Santiago leaves DST on 2026-04-05 and enters it on 2026-09-06: noon is 15:00Z or 16:00Z.
  let seed = 99;
  const rand = (n: number) => (seed = (seed * 1103515245 + 12345) % 2147483648) % n;
  const starts = [Date.UTC(2026, 3, 3, 12), Date.UTC(2026, 8, 4, 12)];
  const records: LegacyRecord[] = [];
  for (let i = 0; i < 400; i++) {
    const ms = starts[i % 2]! + rand(4 * 86_400_000);
    records.push(legacy(new Date(ms).toISOString().replace("Z", "+00:00"), { _id: i }));
  }
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await writeLegacy(src, "weather.json", records);
  const summary = await migrate(src, dst, { groupBy: "night", timeZone: zone });
  let total = 0;
  for (const file of summary.files) {
    const lines = (await readLines(file.path)).map((l) => JSON.parse(l));
    const before = total;
    total += lines.length;
    lines.forEach((e, i) => {
      assert.equal(siteFileName(dayKey(Date.parse(e.ts), zone)), file.name, e.ts);
      assert.equal(e.seq, before + i + 1);
      if (i > 0) assert.ok(lines[i - 1].ts <= e.ts);
    });
  }
  assert.equal(total, 400);
});

Deno.test("obs-utils telemetry migrate --group-by takes any case and refuses --tz without night", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await writeLegacy(src, "weather.json", [legacy("2026-03-05T14:00:00Z")]);
  const night = await migrateCli([
    "--source",
    src,
    "--dest",
    dst,
    "--group-by",
    "NIGHT",
    "--tz",
    "America/Santiago",
  ]);
  assert.equal(night.code, 0, night.stderr);
  assert.match(
    night.stdout,
    /\n {2}files: site_20260304\.ndjson\n {2}grouped by local-noon night\n/,
  );
  const tzOnly = await migrateCli(["--source", src, "--dest", join(tmp.path, "x"), "--tz", "UTC"]);
  assert.equal(tzOnly.code, 2);
  assert.match(tzOnly.stderr, /--tz applies only with --group-by night/);
  const bad = await migrateCli([
    "--source",
    src,
    "--dest",
    join(tmp.path, "x"),
    "--group-by",
    "week",
  ]);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--group-by must be date or night, not "week"/);
  const zone = await migrateCli([
    "--source",
    src,
    "--dest",
    join(tmp.path, "x"),
    "--group-by",
    "night",
    "--tz",
    "Mars/Olympus",
  ]);
  assert.equal(zone.code, 2);
  assert.match(zone.stderr, /Mars\/Olympus/);
  await assert.rejects(() => Deno.stat(join(tmp.path, "x")), Deno.errors.NotFound);
});

Deno.test("migrate() throws RangeError for an unknown groupBy or time zone before touching anything", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await writeLegacy(src, "weather.json", [legacy("2026-03-05T14:00:00Z")]);
  await assert.rejects(() => migrate(src, dst, { groupBy: "week" as "night" }), {
    name: "RangeError",
    message: 'groupBy must be "date" or "night", not "week"',
  });
  await assert.rejects(
    () => migrate(src, dst, { groupBy: "night", timeZone: "Mars/Olympus" }),
    RangeError,
  );
  await assert.rejects(() => Deno.stat(dst), Deno.errors.NotFound);
});

Deno.test("migrate() after a migration killed mid-run still leaves nothing but its output files", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await sampleStore(src, 2);
  // What kill -9 leaves: the lock file it created (marked as a migration's) and its scratch space.
  await Deno.mkdir(join(dst, ".migrate-tmp-dead"), { recursive: true });
  await Deno.writeTextFile(join(dst, ".migrate-tmp-dead", "site_20260301.ndjson"), '{"seq":1');
  await Deno.writeTextFile(join(dst, ".lock"), "99999\nmigrate\n");
  await migrate(src, dst);
  assert.deepEqual((await treeState(dst)).map((e) => e.split(" ")[0]), [
    REJECTS_FILE,
    "site_20260301.ndjson",
    "site_20260302.ndjson",
  ]);
});

Deno.test("migrate() marks its lock so a server refused the directory meanwhile is told who holds it", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await sampleStore(src, 1);
  let seen: string | undefined;
  await migrate(src, dst, {
    onProgress: (p) => {
      if (p.phase === "commit" && seen === undefined) {
        seen = Deno.readTextFileSync(join(dst, ".lock"));
      }
    },
  });
  assert.equal(seen, `${Deno.pid}\nmigrate\n`);
  await assert.rejects(() => Deno.stat(join(dst, ".lock")), Deno.errors.NotFound);
});
