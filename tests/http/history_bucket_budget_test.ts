/**
 * `GET /history?every=` holds no more than its memory budget (docs/history.md, "Memory"),
 * whatever `limit` says: a range of many buckets x many fields is answered in pages that end
 * with `{"truncated": true, "next_since": ...}`, the service's resident memory stays bounded,
 * and the pages together are exactly the buckets of the whole range. A real service spawned as
 * `run` (its /proc status read), over a real site directory.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { tempDir } from "../_shared/util.ts";
import { rssOf } from "../_shared/history_util.ts";
import { spawnServer } from "../../server.ts";

const FIELDS = 40;
const EVENTS = 15_000;
const EVERY_MS = 10_000;
const START = Date.parse("2026-05-10T12:00:00Z");

function value(i: number, k: number): number {
  return ((i * 7 + k * 13) % 1000) / 10;
}

/** One event of 40 numeric fields every 10 s (one bucket each), as nightly files in UTC. */
async function manyBuckets(dir: string): Promise<void> {
  const byNight = new Map<string, string[]>();
  for (let i = 0; i < EVENTS; i++) {
    const ms = START + i * EVERY_MS;
    const data: Record<string, number> = {};
    for (let k = 0; k < FIELDS; k++) data[`f${k}`] = value(i, k);
    const ts = new Date(ms).toISOString();
    const night = new Date(ms - 43_200_000).toISOString().slice(0, 10).replaceAll("-", "");
    const line = `{"seq":${i + 1},"ts":"${ts}","type":"weather","data":${
      JSON.stringify(data)
    },"meta":{}}`;
    byNight.set(night, [...(byNight.get(night) ?? []), line]);
  }
  for (const [night, lines] of byNight) {
    await Deno.writeTextFile(join(dir, `site_${night}.ndjson`), lines.join("\n") + "\n");
  }
}

/** The buckets of the whole range, computed here without any bound. */
function expectedBuckets(): unknown[] {
  const out: unknown[] = [];
  for (let i = 0; i < EVENTS; i++) {
    const fields: Record<string, unknown> = {};
    for (let k = 0; k < FIELDS; k++) {
      const v = value(i, k);
      fields[`f${k}`] = { mean: v, min: v, max: v, last: v };
    }
    out.push({
      t: new Date(START + i * EVERY_MS).toISOString(),
      type: "weather",
      count: 1,
      fields,
    });
  }
  return out;
}

Deno.test("history every= answers a range over its memory budget in truncated pages that lose nothing", async () => {
  await using tmp = await tempDir();
  const siteDir = join(tmp.path, "site");
  await Deno.mkdir(siteDir);
  await manyBuckets(siteDir);
  await using server = await spawnServer({
    siteDir,
    host: "127.0.0.1",
    port: 0,
    timeZone: "UTC",
    output: "null",
  });
  const until = new Date(START + EVENTS * EVERY_MS).toISOString();
  let since = new Date(START).toISOString();
  const got: unknown[] = [];
  let pages = 0;
  let peakGrowth = 0;
  for (; pages < 20; pages++) {
    const before = await rssOf(server.pid);
    let peak = before;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        peak = Math.max(peak, await rssOf(server.pid));
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    const res = await fetch(
      `${server.url}/history?type=weather&every=10s&limit=1000000&since=${since}&until=${until}`,
    );
    const text = await res.text();
    sampling = false;
    await sampler;
    assert.equal(res.status, 200, text.slice(0, 300));
    peakGrowth = Math.max(peakGrowth, peak - before);
    const lines = text.trimEnd().split("\n").map((l) => JSON.parse(l));
    const last = lines.at(-1);
    if (last?.truncated !== true) {
      got.push(...lines);
      break;
    }
    assert.equal(typeof last.next_since, "string");
    got.push(...lines.slice(0, -1));
    // Continuing from next_since may repeat the lines of that instant: drop repeats.
    since = last.next_since;
    while (got.length > 0 && (got.at(-1) as { t: string }).t >= since) got.pop();
  }
  // 15,000 buckets of 40 fields held at once grew it by 150 MB; the budget holds about 50 MB.
  assert.ok(
    peakGrowth < 90 * 1024 * 1024,
    `the service grew by ${Math.round(peakGrowth / 1048576)} MB answering one page`,
  );
  assert.ok(pages >= 2, `the range came in ${pages + 1} page(s): the budget did not truncate it`);
  assert.ok(pages < 20, "the pages never ended");
  assert.deepEqual(got, expectedBuckets());
});

Deno.test("a bucket set over its cells keeps the earliest start, and lines going back in time do not sort it per line", async () => {
  const { BucketSet } = await import("../../core/buckets.ts");
  // One start of 3 buckets x 3 fields is over a budget of 4 cells: it is kept, whole.
  const one = new BucketSet({ everyMs: 10_000, aggregates: ["count"], maxCells: 4 });
  for (const type of ["a", "b", "c"]) one.add(0, type, { x: 1, y: 2 });
  one.add(10_000, "a", { x: 1 });
  assert.equal(one.truncatedAt, 10_000);
  assert.equal([...one.drain()].length, 3);
  // 40,000 events of 2 fields, latest first (a file whose clock ran backwards): giving up the
  // latest starts frees room for many more, so it is not done (and sorted) once per line.
  const set = new BucketSet({ everyMs: 10_000, aggregates: ["mean"], maxCells: 20_000 });
  const began = performance.now();
  for (let i = 40_000; i > 0; i--) set.add(i * 10_000, "weather", { x: i, y: -i });
  const took = performance.now() - began;
  const kept = [...set.drain()];
  assert.ok(kept.length > 0 && kept.length * 3 <= 20_000, `${kept.length} buckets kept`);
  assert.equal(set.truncatedAt, Date.parse(kept.at(-1)!.t) + 10_000);
  assert.ok(took < 2_000, `40,000 lines took ${Math.round(took)} ms`);
});
