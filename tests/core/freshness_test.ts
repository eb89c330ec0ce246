/** Tests of `core/freshness.ts` and `store/disk_watch.ts`, with an injected clock. @module */

import assert from "node:assert/strict";
import {
  checkReport,
  fieldLevel,
  judgeType,
  numericValue,
  typesReport,
  valueAt,
} from "../../core/freshness.ts";
import { parseTypes } from "../../core/types_registry.ts";
import { DISK_WARN_EVERY_MS, DiskWatch } from "../../store/disk_watch.ts";

const REGISTRY = parseTypes(
  JSON.stringify({
    weather: {
      stale_after_s: 180,
      critical: true,
      fields: {
        wind_mps: { label: "Wind", unit: "m/s", warn_above: 10, alarm_above: 15 },
        sky_temp_c: { unit: "°C", alarm_above: -15 },
        rain: { alarm_if: true },
        safe: { alarm_if: false },
        "system.free_space": { unit: "GB", warn_below: 20, alarm_below: 5 },
        altitude: { unit: "m", alarm_below: 3000 },
      },
    },
    power: { stale_after_s: 90, critical: true, fields: { ac_ok: { alarm_if: false } } },
    dome: { critical: false, fields: { state: { warn_if: "moving" } } },
  }),
  "t.json",
);
const WEATHER = REGISTRY.get("weather")!;
const NOW = Date.parse("2026-11-25T06:00:00.000Z");
const iso = (ms: number) => new Date(ms).toISOString();

Deno.test("a type goes stale exactly after stale_after_s, judged on its ts", () => {
  const at = (ageMs: number) => judgeType(WEATHER, { ts: iso(NOW - ageMs), data: {} }, NOW).state;
  assert.equal(at(0), "ok");
  assert.equal(at(179_999), "ok");
  assert.equal(at(180_000), "ok");
  assert.equal(at(180_001), "stale");
  // A ts a little in the future (clocks differ) is fresh, never stale.
  assert.equal(at(-60_000), "ok");
});

Deno.test("a ts more than a minute in the future is stale, naming the sender's clock", () => {
  const status = judgeType(WEATHER, { ts: iso(NOW + 3_600_000), data: {} }, NOW);
  assert.equal(status.state, "stale");
  assert.deepEqual(status.reasons, [
    "ts 3600 s in the future (more than 60 s ahead, so freshness cannot be established); check the sender's clock",
  ]);
  // Stale outranks an alarm, as for an old ts; an unregistered type is not judged.
  const alarm = judgeType(WEATHER, { ts: iso(NOW + 3_600_000), data: { rain: true } }, NOW);
  assert.equal(alarm.state, "stale");
  assert.equal(judgeType(undefined, { ts: iso(NOW + 3_600_000), data: {} }, NOW).state, "ok");
});

Deno.test("freshness follows the measurement ts, not the time the event arrived", () => {
  // Received just now but measured four minutes ago (a station that uploads late): stale.
  const late = judgeType(WEATHER, { ts: iso(NOW - 240_000), data: {} }, NOW);
  assert.equal(late.state, "stale");
  assert.equal(late.age_s, 240);
  assert.deepEqual(late.reasons, ["stale for 240 s (limit 180 s)"]);
});

Deno.test("a type without stale_after_s is never stale, however old", () => {
  const dome = REGISTRY.get("dome")!;
  assert.equal(judgeType(dome, { ts: "2000-01-01T00:00:00.000Z", data: {} }, NOW).state, "ok");
  assert.equal(judgeType(undefined, { ts: "2000-01-01T00:00:00.000Z", data: {} }, NOW).state, "ok");
});

Deno.test("limits give reasons that name field, value, unit and limit", () => {
  const judge = (data: Record<string, unknown>) => judgeType(WEATHER, { ts: iso(NOW), data }, NOW);
  assert.deepEqual(judge({ wind_mps: 16.2 }).reasons, ["wind_mps 16.2 m/s above alarm 15"]);
  assert.equal(judge({ wind_mps: 16.2 }).state, "alarm");
  assert.deepEqual(judge({ wind_mps: 12 }).reasons, ["wind_mps 12 m/s above warn 10"]);
  assert.equal(judge({ wind_mps: 12 }).state, "warn");
  // On the limit is not past it.
  assert.equal(judge({ wind_mps: 15, sky_temp_c: -15 }).state, "warn");
  assert.equal(judge({ wind_mps: 10 }).state, "ok");
  assert.deepEqual(judge({ rain: true, safe: false }).reasons, [
    "rain is true (alarm if true)",
    "safe is false (alarm if false)",
  ]);
  // A boolean equal to no limit is fine, and a string is never compared as a number.
  assert.equal(judge({ rain: false, safe: true, wind_mps: "16.2" }).state, "ok");
  // An alarm outranks a warning whatever the field order.
  assert.equal(judge({ wind_mps: 12, rain: true }).state, "alarm");
});

Deno.test("limits apply to dotted nested fields", () => {
  const judge = (data: Record<string, unknown>) => judgeType(WEATHER, { ts: iso(NOW), data }, NOW);
  assert.deepEqual(judge({ system: { free_space: 12 } }).reasons, [
    "system.free_space 12 GB below warn 20",
  ]);
  assert.equal(judge({ system: { free_space: 3 } }).state, "alarm");
  // A literal dotted key is found first.
  assert.equal(judge({ "system.free_space": 3 }).state, "alarm");
  // Absent, an array on the way, or null: no value, no reason.
  for (const data of [{}, { system: null }, { system: [12] }, { system: { free: 1 } }]) {
    assert.equal(judge(data).state, "ok", JSON.stringify(data));
  }
});

Deno.test('a "<number> <unit>" string counts as that number only in the field\'s unit', () => {
  const judge = (altitude: unknown) =>
    judgeType(WEATHER, { ts: iso(NOW), data: { altitude } }, NOW);
  assert.deepEqual(judge("2900.0 m").reasons, ["altitude 2900 m below alarm 3000"]);
  assert.equal(judge("3397.0 m").state, "ok");
  assert.equal(judge("2900.0 ft").state, "ok");
  assert.equal(judge("2900.0m").state, "ok");
  assert.equal(numericValue("-1.5e3 m", "m"), -1500);
  assert.equal(numericValue("1e999 m", "m"), undefined);
  assert.equal(numericValue("NaN m", "m"), undefined);
  assert.equal(numericValue(" 12 GB ", "GB"), 12);
  assert.equal(numericValue("12 GB", undefined), undefined);
  assert.equal(numericValue(Infinity, "m"), undefined);
});

Deno.test("warn_if and alarm_if compare objects and strings by value", () => {
  assert.equal(fieldLevel("state", { warn_if: "moving" }, "moving")?.level, "warn");
  assert.equal(fieldLevel("state", { warn_if: "moving" }, "parked"), undefined);
  assert.equal(fieldLevel("pos", { alarm_if: { a: [1] } }, { a: [1] })?.level, "alarm");
  assert.equal(fieldLevel("x", { alarm_if: null }, null)?.reason, "x is null (alarm if null)");
  assert.equal(valueAt({ a: { b: { c: 1 } } }, "a.b.c"), 1);
});

Deno.test("GET /types entries: registered types in file order, then the others by name; never-seen types have null ts", () => {
  const latest = new Map([
    ["weather", { ts: iso(NOW - 1000), data: { wind_mps: 16.2 } }],
    ["zz", { ts: iso(NOW - 5000), data: {} }],
    ["aa", { ts: iso(NOW - 5000), data: {} }],
  ]);
  const report = typesReport(REGISTRY, (t) => latest.get(t), latest.keys(), NOW);
  assert.deepEqual(Object.keys(report), ["weather", "power", "dome", "aa", "zz"]);
  assert.equal(report.weather!.state, "alarm");
  assert.equal(report.weather!.age_s, 1);
  assert.deepEqual(report.power, {
    description: null,
    critical: true,
    stale_after_s: 90,
    order: null,
    fields: { ac_ok: { alarm_if: false } },
    last_ts: null,
    age_s: null,
    state: "stale",
    reasons: ["never seen"],
  });
  assert.equal(report.dome!.state, "ok");
  assert.equal(report.aa!.critical, false);
});

Deno.test("check fails for a critical type that is stale, in alarm or never seen, and for low disk", () => {
  const disk = { freeBytes: 50 * 1024 ** 3, minFreeBytes: 1024 ** 3 };
  const fresh = new Map([
    ["weather", { ts: iso(NOW - 1000), data: { wind_mps: 3 } }],
    ["power", { ts: iso(NOW - 1000), data: { ac_ok: true } }],
  ]);
  const ok = checkReport(REGISTRY, (t) => fresh.get(t), NOW, disk);
  assert.equal(ok.ok, true);
  assert.deepEqual(ok.failing, []);
  assert.deepEqual(ok.critical, { weather: "ok", power: "ok" });

  const bad = new Map([
    ["weather", { ts: iso(NOW - 412_300), data: { wind_mps: 16.2 } }],
    ["dome", { ts: iso(NOW - 1000), data: { state: "moving" } }],
  ]);
  const failed = checkReport(REGISTRY, (t) => bad.get(t), NOW, {
    freeBytes: 512 * 1024 ** 2,
    minFreeBytes: 1024 ** 3,
  });
  assert.equal(failed.ok, false);
  assert.deepEqual(failed.failing, [
    "weather: stale for 412 s (limit 180 s)",
    "weather: wind_mps 16.2 m/s above alarm 15",
    "power: stale, never seen",
    "disk: 512 MiB free, below --min-free 1.0 GiB",
  ]);
  // A warning on a critical type, or anything on a non-critical one, does not fail the check.
  const warned = new Map([
    ["weather", { ts: iso(NOW), data: { wind_mps: 12 } }],
    ["power", { ts: iso(NOW), data: {} }],
  ]);
  assert.equal(checkReport(REGISTRY, (t) => warned.get(t), NOW, disk).ok, true);
  // Free space that cannot be told is not a failure.
  assert.equal(
    checkReport(REGISTRY, (t) => fresh.get(t), NOW, { freeBytes: null, minFreeBytes: 1 }).ok,
    true,
  );
});

Deno.test("a seeded walk of ages and values agrees with the rules, state by state", () => {
  let seed = 7;
  const rand = () => (seed = (seed * 16807) % 2147483647) / 2147483647;
  for (let i = 0; i < 2000; i++) {
    const age = Math.floor(rand() * 400_000) - 20_000;
    const wind = Math.round(rand() * 2000) / 100;
    const status = judgeType(WEATHER, { ts: iso(NOW - age), data: { wind_mps: wind } }, NOW);
    const want = age > 180_000 ? "stale" : wind > 15 ? "alarm" : wind > 10 ? "warn" : "ok";
    assert.equal(status.state, want, `age ${age} wind ${wind}`);
  }
});

Deno.test("the low-disk warning is logged at most once an hour, and only while below --min-free", async () => {
  let now = NOW;
  let free: number | null = 2000;
  const warnings: string[] = [];
  const watch = new DiskWatch("/srv/telemetry", 1000, {
    read: () => Promise.resolve(free),
    now: () => now,
    warn: (m) => warnings.push(m),
  });
  assert.equal(await watch.sample(), 2000);
  assert.equal(warnings.length, 0);
  free = 999;
  await watch.sample();
  assert.deepEqual(warnings, [
    "disk space low: 999 B free on the file system of /srv/telemetry, below --min-free 1000 B; free some space or lower --min-free (this warning repeats at most once an hour)",
  ]);
  for (let step = 0; step < 59; step++) {
    now += 60_000;
    await watch.sample();
  }
  assert.equal(warnings.length, 1);
  now = NOW + DISK_WARN_EVERY_MS;
  await watch.sample();
  assert.equal(warnings.length, 2);
  free = null;
  now += 2 * DISK_WARN_EVERY_MS;
  assert.equal(await watch.sample(), null);
  assert.equal(watch.last, null);
  assert.equal(warnings.length, 2);
});
