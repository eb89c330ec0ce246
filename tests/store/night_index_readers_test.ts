/**
 * The readers of a range answer the same with a night's time index as without it: `read` (through
 * `readHistoryLines()`), `GET /history` as lines, as CSV and as buckets, over seeded nights with
 * odd lines (a torn tail, a clock stepped back, another type with the same field names, unicode,
 * a `ts` in another offset form, fields in another order).
 */

import assert from "node:assert/strict";
import { readHistoryLines } from "../../store/history.ts";
import { nightIndexPath, readNightIndex } from "../../store/night_index.ts";
import { storedFile } from "../../store/site_files.ts";
import { historyRoute } from "../../http/history.ts";
import { NO_TYPES } from "../../core/types_registry.ts";
import { formatTimestamp } from "../../wire/event.ts";
import { tempDir } from "../_shared/util.ts";
import { ODD_T0, oddLines, writeOddNight } from "../_shared/odd_night.ts";

const MINUTE = 60_000;

/** Ranges across the seeded night: its start, middle and end, past its end, and all of it. */
const RANGES: [number, number][] = [
  [ODD_T0 - 30 * MINUTE, ODD_T0 + 20 * MINUTE],
  [ODD_T0 + 61 * MINUTE, ODD_T0 + 67 * MINUTE],
  [ODD_T0 + 150 * MINUTE, ODD_T0 + 600 * MINUTE],
  [ODD_T0 + 700 * MINUTE, ODD_T0 + 800 * MINUTE],
  [ODD_T0 - 60 * MINUTE, ODD_T0 + 900 * MINUTE],
];

/** Every answer of every reader for one range. */
async function answers(dir: string, [since, until]: [number, number]): Promise<string[]> {
  const out: string[] = [];
  for (const types of [undefined, ["weather"], ["dome", "wéather"]]) {
    const lines = readHistoryLines(dir, { timeZone: "UTC", since, until, types });
    out.push((await Array.fromAsync(lines)).join("\n"));
  }
  const route = historyRoute({ siteDir: dir, timeZone: "UTC", types: NO_TYPES });
  const range = `since=${formatTimestamp(since)}&until=${formatTimestamp(until)}&limit=100000`;
  for (
    const query of [
      range,
      `${range}&type=weather`,
      `${range}&type=weather&format=csv&fields=temp,wind`,
      `${range}&type=weather&every=1m&agg=mean,min,max,last,count`,
      `${range}&every=5m&agg=count`,
      `${range}&type=weather,dome&every=7m&fields=temp`,
    ]
  ) {
    const res = await route(new URL(`http://localhost/history?${query}`));
    assert.equal(res.status, 200, query);
    out.push(await res.text());
  }
  return out;
}

Deno.test("every reader answers the same with a night's time index as without it", async () => {
  for (const seed of [7, 8]) {
    await using tmp = await tempDir();
    const path = await writeOddNight(tmp.path, oddLines(seed, 9000));
    for (const range of RANGES) {
      await Deno.remove(nightIndexPath("20260510", tmp.path)).catch(() => {});
      const without = await answers(tmp.path, range);
      assert.ok(await readNightIndex(storedFile(path)), "indexed by the reads without it");
      const through = await answers(tmp.path, range);
      assert.deepEqual(through, without, `seed ${seed}, range ${range.map(formatTimestamp)}`);
    }
  }
});

Deno.test("the answers through the index hold lines, not only agree", async () => {
  await using tmp = await tempDir();
  await writeOddNight(tmp.path, oddLines(7, 9000));
  const [raw] = await answers(tmp.path, RANGES[1]!);
  await answers(tmp.path, RANGES[1]!);
  const [again, weather] = await answers(tmp.path, RANGES[1]!);
  assert.equal(again, raw);
  assert.ok(raw!.split("\n").length > 100 && weather!.split("\n").length > 50);
});
