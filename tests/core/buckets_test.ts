/**
 * `GET /history?every=` (docs/history.md, "Buckets") against a real service on port 0: every
 * bucket equals an independent computation over the same seeded lines, written differently.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { tempDir, testServer } from "../_shared/util.ts";
import { parseTypes } from "../../core/types_registry.ts";
import { compressFile } from "../../store/compress.ts";

/** A seeded generator (mulberry32). */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const TYPES = parseTypes(
  JSON.stringify({ weather: { fields: { "wind.speed": { unit: "m/s" } } } }),
  "types.json",
);

interface Stored {
  ms: number;
  type: string;
  data: Record<string, unknown>;
}

/** Two UTC nights of three types at random moments, the first night compressed. */
async function seededSite(dir: string, seed: number): Promise<Stored[]> {
  const rnd = random(seed);
  const events: Stored[] = [];
  let ms = Date.parse("2026-05-10T12:00:00Z");
  const end = Date.parse("2026-05-12T12:00:00Z");
  while ((ms += Math.floor(rnd() * 90_000)) < end) {
    const r = rnd();
    const type = r < 0.5 ? "weather" : r < 0.8 ? "mount" : "dome";
    const value = Math.round((rnd() - 0.3) * 1e4) / 100;
    const data: Record<string, unknown> = type === "weather"
      ? {
        temp: value,
        // registered unit: counts; an unknown unit or a bare string does not
        wind: { speed: rnd() < 0.8 ? `${value} m/s` : `${value} km/h`, dir: "N" },
        rain: rnd() < 0.1,
      }
      : type === "mount"
      ? { alt: value, pos: { ra: value * 2, dec: rnd() < 0.5 ? null : -value }, list: [1, 2] }
      : { open: rnd() < 0.5, label: "west" };
    events.push({ ms, type, data });
  }
  const nights = new Map<string, string[]>();
  events.forEach((e, i) => {
    const night = new Date(e.ms - 12 * 3_600_000).toISOString().slice(0, 10).replaceAll("-", "");
    const text = JSON.stringify({
      seq: i + 1,
      ts: new Date(e.ms).toISOString(),
      type: e.type,
      data: e.data,
      meta: {},
    });
    nights.set(night, [...(nights.get(night) ?? []), text]);
  });
  for (const [night, lines] of nights) {
    await Deno.writeTextFile(join(dir, `site_${night}.ndjson`), lines.join("\n") + "\n");
  }
  await compressFile(join(dir, "site_20260510.ndjson"));
  return events;
}

/** The numbers of an event's data by dotted path, found without any code of the package. */
function numbersOf(type: string, data: Record<string, unknown>): [string, number][] {
  const out: [string, number][] = [];
  const stack: [string, unknown][] = Object.entries(data);
  while (stack.length > 0) {
    const [path, value] = stack.shift()!;
    if (typeof value === "number") out.push([path, value]);
    else if (typeof value === "string" && type === "weather" && path === "wind.speed") {
      const parts = value.split(" ");
      if (parts.length === 2 && parts[1] === "m/s") out.push([path, parseFloat(parts[0]!)]);
    } else if (value && typeof value === "object" && !Array.isArray(value)) {
      stack.unshift(
        ...Object.entries(value).map(([k, v]) => [`${path}.${k}`, v] as [string, unknown]),
      );
    }
  }
  return out;
}

/** The buckets as the contract states them, computed by grouping into arrays first. */
function expected(
  events: Stored[],
  everyMs: number,
  since: number,
  until: number,
  aggs: string[],
  fields?: string[],
): Record<string, unknown>[] {
  const groups = new Map<
    string,
    { type: string; start: number; n: number; values: Map<string, number[]> }
  >();
  for (const e of events) {
    if (e.ms < since || e.ms >= until) continue;
    const start = e.ms - (((e.ms % everyMs) + everyMs) % everyMs);
    const key = `${String(start).padStart(16, "0")} ${e.type}`;
    const g = groups.get(key) ?? { type: e.type, start, n: 0, values: new Map() };
    groups.set(key, g);
    g.n += 1;
    for (const [path, n] of numbersOf(e.type, e.data)) {
      if (fields && !fields.some((f) => path === f || path.startsWith(f + "."))) continue;
      g.values.set(path, [...(g.values.get(path) ?? []), n]);
    }
  }
  return [...groups.keys()].sort().map((key) => {
    const g = groups.get(key)!;
    const f: Record<string, Record<string, number>> = {};
    for (const [path, list] of g.values) {
      const all: Record<string, number> = {
        mean: list.reduce((a, b) => a + b, 0) / list.length,
        min: Math.min(...list),
        max: Math.max(...list),
        last: list[list.length - 1]!,
        count: list.length,
      };
      f[path] = Object.fromEntries(aggs.map((a) => [a, all[a]!]));
    }
    return { t: new Date(g.start).toISOString(), type: g.type, count: g.n, fields: f };
  });
}

async function buckets(url: string): Promise<Record<string, unknown>[]> {
  const res = await fetch(url);
  const text = await res.text();
  assert.equal(res.status, 200, text);
  return text.trimEnd().split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));
}

/** Equal, means within rounding (a sum in another order may differ in the last bits). */
function assertSameBuckets(got: Record<string, unknown>[], want: Record<string, unknown>[]) {
  assert.equal(got.length, want.length);
  const round = (list: Record<string, unknown>[]) =>
    JSON.parse(JSON.stringify(list, (k, v) => k === "mean" ? Math.round(v * 1e6) / 1e6 : v));
  assert.deepEqual(round(got), round(want));
}

Deno.test("GET /history?every= buckets equal an independent computation over the stored lines", async () => {
  await using tmp = await tempDir();
  const events = await seededSite(tmp.path, 29);
  await using server = await testServer({ siteDir: tmp.path, types: TYPES });
  const since = "2026-05-10T15:07:00Z", until = "2026-05-12T09:00:00Z";
  for (
    const [every, ms] of [["10s", 10_000], ["5m", 300_000], ["1h", 3_600_000], [
      "7d",
      7 * 86_400_000,
    ]] as const
  ) {
    const got = await buckets(`${server.url}/history?since=${since}&until=${until}&every=${every}`);
    const want = expected(events, ms, Date.parse(since), Date.parse(until), [
      "mean",
      "min",
      "max",
      "last",
    ]);
    assert.ok(want.length > 0);
    assertSameBuckets(got, want);
  }
});

Deno.test("GET /history?every= keeps the aggregates asked for, in that order, and fields narrow them", async () => {
  await using tmp = await tempDir();
  const events = await seededSite(tmp.path, 7);
  await using server = await testServer({ siteDir: tmp.path, types: TYPES });
  const since = "2026-05-10T12:00:00Z", until = "2026-05-12T12:00:00Z";
  const got = await buckets(
    `${server.url}/history?since=${since}&until=${until}&every=30m&agg=count,max&type=weather,mount&fields=wind,pos.dec`,
  );
  const want = expected(
    events.filter((e) => e.type !== "dome"),
    1_800_000,
    Date.parse(since),
    Date.parse(until),
    ["count", "max"],
    ["wind", "pos.dec"],
  );
  assertSameBuckets(got, want);
  const first = got.find((b) => b.type === "weather")!.fields as Record<string, unknown>;
  assert.deepEqual(Object.keys(Object.values(first)[0] as object), ["count", "max"]);
});

Deno.test("GET /history?every= with a limit, continued from next_since, gives every bucket", async () => {
  await using tmp = await tempDir();
  const events = await seededSite(tmp.path, 11);
  await using server = await testServer({ siteDir: tmp.path, types: TYPES });
  const since = "2026-05-10T12:00:00Z", until = "2026-05-12T12:00:00Z";
  const want = expected(events, 600_000, Date.parse(since), Date.parse(until), ["mean", "last"]);
  const got = new Map<string, Record<string, unknown>>();
  let from = since;
  for (let page = 0; page < 1000; page++) {
    const lines = await buckets(
      `${server.url}/history?since=${from}&until=${until}&every=10m&agg=mean,last&limit=37`,
    );
    const last = lines.at(-1) as { truncated?: boolean; next_since?: string } | undefined;
    const body = last?.truncated ? lines.slice(0, -1) : lines;
    assert.ok(body.length <= 37);
    for (const b of body) got.set(`${b.t} ${b.type}`, b);
    if (!last?.truncated) break;
    assert.ok(Date.parse(last.next_since!) > Date.parse(from), "each page moves on");
    from = last.next_since!;
  }
  assertSameBuckets([...got.values()], want);
});
