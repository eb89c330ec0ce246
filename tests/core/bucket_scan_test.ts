/**
 * `core/bucket_scan.ts`: lines counted as bytes in place give exactly the buckets of each line
 * parsed whole (the path every line took before), over seeded lines in the service's layout and
 * lines that only look like it.
 */

import assert from "node:assert/strict";
import { BucketScan, isCanonicalTs } from "../../core/bucket_scan.ts";
import { BucketSet } from "../../core/buckets.ts";
import { formatTimestamp, isJsonObject } from "../../wire/event.ts";
import { buildTail, DATA_KEY, META_KEY } from "../../wire/ndjson.ts";
import { readHistoryLines, readHistoryRegions } from "../../store/history.ts";
import { tempDir } from "../_shared/util.ts";
import { Rng } from "../_shared/fault_util.ts";
import { layoutLine, ODD_T0, oddLines, seededNumber, writeOddNight } from "../_shared/odd_night.ts";

const EVERY = 60_000;
const T0 = ODD_T0;
const UNITS: Record<string, string> = { "wind": "m/s", "a.b.d": "m/s" };

function newSet(fields?: string[]): BucketSet {
  return new BucketSet({
    everyMs: EVERY,
    aggregates: ["mean", "min", "max", "last", "count"],
    fields,
    unitOf: (type, path) => type === "weather" ? UNITS[path] : undefined,
  });
}

/** The buckets as before: each line the store keeps parsed whole, its `ts` by `Date.parse`. */
async function parsedWhole(dir: string, options: object, fields?: string[]) {
  const set = newSet(fields);
  for await (const line of readHistoryLines(dir, { timeZone: "UTC", ...options })) {
    let event: unknown;
    try {
      event = JSON.parse(line);
    } catch {
      continue;
    }
    if (!isJsonObject(event) || typeof event.ts !== "string" || typeof event.type !== "string") {
      continue;
    }
    set.add(Date.parse(event.ts), event.type, event.data);
  }
  return [...set.drain()];
}

/** The buckets through the scan, reading the same range as bytes. */
async function scanned(dir: string, options: object, fields?: string[]) {
  const set = newSet(fields);
  const scan = new BucketScan(set, { everyMs: EVERY, strings: true });
  const raw = readHistoryRegions(dir, { timeZone: "UTC", ...options });
  for await (const { bytes } of raw.regions) scan.addRegion(bytes, raw.filter);
  return [...set.drain()];
}

async function writeNight(dir: string, lines: string[], torn = ""): Promise<void> {
  await writeOddNight(dir, lines, torn);
}

Deno.test("BucketScan counts seeded lines exactly as parsing each whole line does", async () => {
  for (const seed of [1, 2, 3]) {
    await using tmp = await tempDir();
    await writeNight(tmp.path, oddLines(seed, 3000), '{"seq":9999,"ts":"2026-05-1');
    for (
      const options of [
        { types: ["weather"] },
        { types: ["weather", "dome"] },
        { since: T0 + 1_800_000, until: T0 + 5_400_000 },
        {},
      ]
    ) {
      assert.deepEqual(
        await scanned(tmp.path, options),
        await parsedWhole(tmp.path, options),
        `seed ${seed}, ${JSON.stringify(options)}`,
      );
    }
    for (const fields of [["temp", "wind"], ["a.b"], ["a.b.c", "hum"]]) {
      assert.deepEqual(
        await scanned(tmp.path, { types: ["weather"] }, fields),
        await parsedWhole(tmp.path, { types: ["weather"] }, fields),
        `seed ${seed}, fields ${fields}`,
      );
    }
  }
});

Deno.test("BucketScan reads numbers in place to the same double JSON.parse gives", () => {
  const rng = new Rng(35);
  const texts = ["0", "-0", "0.1", "-0.30000000000000004", "123456789012345", "1234567890123456"];
  for (let i = 0; i < 2000; i++) {
    texts.push(String(seededNumber(rng)), (rng.next() * 100).toFixed(7));
  }
  texts.push("1e5", "1E-7", "2.5e+3", "9007199254740993", "0.000001", "99999999999999.9");
  for (const text of texts) {
    const set = new BucketSet({ everyMs: EVERY, aggregates: ["last"] });
    const scan = new BucketScan(set, { everyMs: EVERY });
    const line = layoutLine(1, T0, "w", { v: 0 }).replace('"v":0', `"v":${text}`) + "\n";
    scan.addRegion(new TextEncoder().encode(line), {
      typeHeads: [],
      since: "",
      until: undefined,
      keep: () => true,
    });
    const got = [...set.drain()][0]?.fields.v?.last;
    assert.ok(Object.is(got, JSON.parse(text)), `${text}: ${got}`);
  }
});

Deno.test("BucketScan buckets a ts that looks canonical but is not as Date.parse reads it", async () => {
  const edges = [
    "2026-13-10T03:00:00.000Z", // month 13
    "2026-02-30T03:00:00.000Z", // Feb 30: Date.parse reads March 2
    "2026-05-10T23:59:60.000Z", // a leap second
    "2026-05-10T24:00:00.000Z", // 24:00: Date.parse reads the next midnight
    "2026-05-10T03:0\u0661:00.000Z", // a non-ASCII digit
    "2026-05-10T03:00:00.000z", // a lower-case zone
  ];
  for (const ts of edges) {
    await using tmp = await tempDir();
    const lines = [
      layoutLine(1, Date.parse("2026-05-10T03:00:10Z"), "weather", { t: 1 }),
      layoutLine(2, T0, "weather", { t: 2 }).replace(formatTimestamp(T0), ts),
      layoutLine(3, Date.parse("2026-05-10T03:00:20Z"), "weather", { t: 4 }),
    ];
    await writeNight(tmp.path, lines);
    assert.deepEqual(await scanned(tmp.path, {}), await parsedWhole(tmp.path, {}), ts);
  }
  assert.equal(isCanonicalTs("2026-05-10T03:00:00.000Z"), true);
  for (const ts of edges) assert.equal(isCanonicalTs(ts), false, ts);
});

Deno.test("BucketScan passes over other types' lines by their bytes and counts only the asked", async () => {
  await using tmp = await tempDir();
  const lines = [
    layoutLine(1, T0, "weather", { t: 1 }),
    layoutLine(2, T0 + 1000, "weather-2", { t: 100 }),
    layoutLine(3, T0 + 2000, "dome", { t: 50 }),
    layoutLine(4, T0 + 3000, "weather", { t: 3 }),
  ];
  await writeNight(tmp.path, lines);
  const buckets = await scanned(tmp.path, { types: ["weather"] });
  assert.deepEqual(buckets.map((b) => [b.type, b.count, b.fields.t?.mean]), [["weather", 2, 2]]);
});

Deno.test("the layout bucket_scan.ts reads is the one buildTail() writes", () => {
  const tail = buildTail("2026-05-10T03:00:00.000Z", '"w"', '{"a":1}', '{"b":2}');
  assert.equal(
    tail,
    `,"ts":"2026-05-10T03:00:00.000Z","type":"w"${DATA_KEY}{"a":1}${META_KEY}{"b":2}}`,
  );
});
