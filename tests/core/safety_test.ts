/**
 * The latched safety verdict (docs/safety.md) on a real service on 127.0.0.1 port 0: alarm,
 * clearing, the latch and its timer, a wall clock step, `telemetry.safety` events, reserved
 * types, `/check` and `/types` while latched, and the metrics.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import {
  type SafetyChange,
  type SafetyVerdict,
  type ServerHandle,
  TelemetryService,
} from "../../server.ts";
import { parseTypes, TypesFileError } from "../../core/types_registry.ts";
import { migrate, REJECTS_FILE } from "../../migrate.ts";
import { quickState } from "../../core/safety.ts";
import { judgeType } from "../../core/freshness.ts";
import {
  getJson,
  postJson,
  promtoolCheck,
  promtoolMissing,
  readLines,
  readSiteLines,
  tempDir,
  testServer,
} from "../_shared/util.ts";

/** A critical weather type with a wind alarm and the given clear_after_s. */
function weatherTypes(clearAfterS: number) {
  return parseTypes(
    JSON.stringify({
      weather: {
        critical: true,
        stale_after_s: 600,
        clear_after_s: clearAfterS,
        fields: { wind_mps: { unit: "m/s", alarm_above: 15 } },
      },
      dome: { stale_after_s: 60 },
    }),
    "types.json",
  );
}

/** Polls `fn` every 20 ms until it answers something, for at most `ms`. */
async function waitFor<T>(what: string, fn: () => Promise<T | undefined>, ms = 10_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (let i = 0; i < 5_000 && Date.now() <= deadline; i++) {
    const value = await fn();
    if (value !== undefined) return value;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}`);
}

async function safety(server: ServerHandle): Promise<SafetyVerdict> {
  const { status, body, headers } = await getJson(`${server.url}/safety`);
  assert.equal(status, 200);
  assert.equal(headers.get("cache-control"), "no-store");
  return body as SafetyVerdict;
}

async function weather(server: ServerHandle, wind: number): Promise<void> {
  const { status } = await postJson(`${server.url}/event`, {
    type: "weather",
    data: { wind_mps: wind },
  });
  assert.equal(status, 200);
}

Deno.test("an alarm that clears keeps the site unsafe for clear_after_s, then the timer makes it safe", async () => {
  await using dir = await tempDir();
  const server = await testServer({ siteDir: join(dir.path, "site"), types: weatherTypes(1) });
  const changes: SafetyChange[] = [];
  const stop = server.service.onSafetyChange((c) => changes.push(c));
  try {
    const first = await safety(server);
    assert.equal(first.safe, false);
    assert.deepEqual(first.reasons, ["weather: stale, never seen"]);
    assert.deepEqual(first.types.weather, {
      state: "stale",
      safe: false,
      latched_until: null,
      waived_until: null,
    });
    await weather(server, 20);
    const alarm = await safety(server);
    assert.deepEqual(alarm.reasons, ["weather: wind_mps 20 m/s above alarm 15"]);
    assert.equal(alarm.types.weather?.state, "alarm");
    assert.equal(alarm.clear_at, null);
    await weather(server, 3);
    const clearing = await safety(server);
    assert.equal(clearing.safe, false);
    assert.equal(clearing.types.weather?.state, "ok");
    assert.equal(clearing.types.weather?.safe, false);
    const until = clearing.types.weather?.latched_until;
    assert.ok(until);
    assert.equal(clearing.clear_at, until);
    const seconds = new Date(Math.ceil(Date.parse(until) / 1000) * 1000).toISOString()
      .replace(".000Z", "Z");
    assert.deepEqual(clearing.reasons, [`weather: clearing, safe at ${seconds} (clear_after_s 1)`]);
    // Nobody asks: the timer ends the latch and the listener hears it.
    const safeChange = await waitFor(
      "the latch to end",
      () => Promise.resolve(changes.find((c) => c.kind === "safety" && c.safe === true)),
    );
    assert.ok(Date.parse(safeChange.ts) >= Date.parse(until) - 1, `${safeChange.ts} < ${until}`);
    const safe = await safety(server);
    assert.deepEqual(
      { safe: safe.safe, reasons: safe.reasons, clear_at: safe.clear_at },
      { safe: true, reasons: [], clear_at: null },
    );
    assert.equal(safe.since, safeChange.ts);
    assert.deepEqual(safe.types.weather, {
      state: "ok",
      safe: true,
      latched_until: null,
      waived_until: null,
    });
    const typeChanges = changes.filter((c) => c.kind === "type").map((c) =>
      `${c.previous}->${c.state}`
    );
    assert.deepEqual(typeChanges, ["stale->alarm", "alarm->ok"]);
  } finally {
    stop();
    await server.shutdown();
  }
});

Deno.test("every change of the verdict is a telemetry.safety event in the site stream", async () => {
  await using dir = await tempDir();
  const siteDir = join(dir.path, "site");
  const server = await testServer({ siteDir, types: weatherTypes(0) });
  try {
    await weather(server, 20);
    await weather(server, 3); // clear_after_s 0: safe at once
    await waitFor("the safe verdict", async () => (await safety(server)).safe || undefined);
    await weather(server, 30);
  } finally {
    await server.shutdown();
  }
  const events = (await readSiteLines(siteDir)).map((l) => JSON.parse(l)).filter((e) =>
    e.type === "telemetry.safety"
  );
  // The first verdict of the directory is where it starts: recorded are the changes from it.
  assert.deepEqual(events.map((e) => e.data), [
    { safe: true, reasons: [], clear_at: null },
    { safe: false, reasons: ["weather: wind_mps 30 m/s above alarm 15"], clear_at: null },
  ]);
});

Deno.test("a wall clock stepping forward an hour does not end a latch early", async () => {
  await using dir = await tempDir();
  const wall = { offset: 0 };
  const mono = { ms: 0 };
  const server = await testServer({
    siteDir: join(dir.path, "site"),
    types: weatherTypes(60),
    clock: () => Date.now() + wall.offset,
    monotonicClock: () => mono.ms,
  });
  try {
    await weather(server, 20);
    mono.ms += 1_000;
    await weather(server, 3);
    const latched = server.service.safety();
    assert.equal(latched.safe, false);
    const until = Date.parse(latched.types.weather!.latched_until!);
    wall.offset = 3_600_000; // the wall clock steps forward an hour; only 10 s really pass
    mono.ms += 10_000;
    await weather(server, 3); // fresh on the stepped clock
    const stepped = server.service.safety();
    assert.equal(stepped.safe, false, stepped.reasons.join("; "));
    assert.equal(stepped.types.weather?.state, "ok");
    // The end moved with the wall clock: at least the 50 s of real time left are still ahead on it
    // (the stepped clock also made the event before look stale, which restarts the count: 60 s).
    const left = Date.parse(stepped.types.weather!.latched_until!) - (Date.now() + wall.offset);
    assert.ok(left > 45_000 && left <= 60_500, `${left} ms left`);
    assert.ok(Date.parse(stepped.types.weather!.latched_until!) > until);
    mono.ms += 49_000;
    assert.equal(server.service.safety().safe, false);
    mono.ms += 11_001;
    assert.equal(server.service.safety().safe, true);
  } finally {
    await server.shutdown();
  }
});

Deno.test("GET /check fails while a critical type is latched, with the clearing reason", async () => {
  await using dir = await tempDir();
  const server = await testServer({ siteDir: join(dir.path, "site"), types: weatherTypes(300) });
  try {
    await weather(server, 20);
    await weather(server, 3);
    const { status, body } = await getJson(`${server.url}/check`);
    assert.equal(status, 503);
    const failing = (body as { failing: string[] }).failing;
    assert.equal(failing.length, 1);
    assert.match(failing[0]!, /^weather: clearing, safe at \S+Z \(clear_after_s 300\)$/);
    const types = (await getJson(`${server.url}/types`)).body as Record<
      string,
      { state: string; latched_until: string | null }
    >;
    assert.equal(types.weather?.state, "ok");
    assert.ok(types.weather?.latched_until);
    assert.equal(types.dome?.latched_until, null);
  } finally {
    await server.shutdown();
  }
});

Deno.test("a client posting a telemetry.* type gets 400 naming the rule, on every path that takes a type", async () => {
  await using dir = await tempDir();
  const server = await testServer({ siteDir: join(dir.path, "site"), types: weatherTypes(0) });
  try {
    const one = await postJson(`${server.url}/event`, { type: "telemetry.safety", data: {} });
    assert.equal(one.status, 400);
    assert.match(one.headers.get("content-type") ?? "", /^application\/problem\+json/);
    assert.match(
      (one.body as { detail: string }).detail,
      /"telemetry\.safety" is reserved: types starting with "telemetry\." are written by the service/,
    );
    const batch = await postJson(`${server.url}/events`, [
      { type: "weather", data: { wind_mps: 1 } },
      { type: "telemetry.x", data: {} },
    ]);
    assert.equal(batch.status, 400);
    assert.match((batch.body as { detail: string }).detail, /item 1.*"telemetry\.x" is reserved/i);
    const ndjson = await fetch(`${server.url}/events`, {
      method: "POST",
      headers: { "content-type": "application/x-ndjson" },
      body: '{"type":"telemetry.safety","data":{"safe":true}}\n',
    });
    assert.equal(ndjson.status, 400);
    assert.match(((await ndjson.json()) as { detail: string }).detail, /reserved/);
    // Nothing of the refused batch was written, and the site is still unsafe.
    assert.equal((await getJson(`${server.url}/current/weather`)).status, 404);
    assert.equal((await safety(server)).safe, false);
  } finally {
    await server.shutdown();
  }
});

Deno.test("without a critical type the site is never safe", async () => {
  await using dir = await tempDir();
  const server = await testServer({ siteDir: join(dir.path, "site") });
  try {
    const verdict = await safety(server);
    assert.equal(verdict.safe, false);
    assert.deepEqual(verdict.reasons, ["no critical types registered (--types)"]);
    assert.deepEqual(verdict.types, {});
  } finally {
    await server.shutdown();
  }
});

Deno.test("/metrics has telemetry_safe and telemetry_safety_changes_total, and promtool accepts it", async () => {
  await using dir = await tempDir();
  const server = await testServer({ siteDir: join(dir.path, "site"), types: weatherTypes(0) });
  try {
    await weather(server, 3);
    await waitFor("the safe verdict", async () => (await safety(server)).safe || undefined);
    const text = await (await fetch(`${server.url}/metrics`)).text();
    const lines = text.split("\n");
    assert.ok(lines.includes(`telemetry_safe{profile="site"} 1`), text);
    assert.ok(lines.includes("# TYPE telemetry_safe gauge"));
    assert.ok(lines.includes("# TYPE telemetry_safety_changes_total counter"));
    // Unsafe at start (where it starts, not a change), then safe: one change.
    assert.ok(lines.includes("telemetry_safety_changes_total 1"), text);
    const promtool = promtoolMissing();
    if (promtool) {
      // deno-lint-ignore no-console
      console.log(`skipping promtool check metrics: ${promtool}`);
      return;
    }
    const { ok, report } = await promtoolCheck(text);
    assert.ok(ok, report);
  } finally {
    await server.shutdown();
  }
});

Deno.test("a types file with a bad clear_after_s is refused with one line naming the path and fix", () => {
  for (const bad of [-1, "900", null]) {
    assert.throws(
      () => parseTypes(JSON.stringify({ weather: { clear_after_s: bad } }), "types.json"),
      (err: unknown) =>
        err instanceof TypesFileError && !err.message.includes("\n") &&
        err.message.startsWith(
          "Cannot use --types types.json: at $.weather.clear_after_s expected a number of seconds, 0 or more",
        ),
    );
  }
  assert.equal(
    parseTypes('{"weather": {"clear_after_s": 0}}', "t.json").get("weather")?.clear_after_s,
    0,
  );
});

Deno.test("migrate sends a legacy record of a telemetry.* type to the rejects file, naming the rule", async () => {
  await using tmp = await tempDir();
  const src = join(tmp.path, "legacy"), dst = join(tmp.path, "site");
  await Deno.mkdir(src);
  await Deno.writeTextFile(
    join(src, "weather.json"),
    [
      `{"_id": "a", "type": "weather", "date": "2026-03-05T09:00:00", "data": {"wind_mps": 2}}`,
      `{"_id": "b", "type": "telemetry.safety", "date": "2026-03-05T10:00:00", "data": {"safe": true}}`,
    ].join("\n") + "\n",
  );
  const summary = await migrate(src, dst);
  assert.equal(summary.records, 1);
  assert.equal(summary.rejects, 1);
  const rejects = (await readLines(join(dst, REJECTS_FILE))).map((l) => JSON.parse(l));
  assert.equal(rejects[0].line, 2);
  assert.match(
    rejects[0].reason,
    /"telemetry\.safety" is reserved: types starting with "telemetry\."/,
  );
});

Deno.test("the ingest path's quick judge agrees with judgeType on 5,000 seeded events", () => {
  let seed = 0x27_2026;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  const spec = {
    critical: true,
    stale_after_s: 60,
    fields: {
      wind_mps: { unit: "m/s", warn_above: 10, alarm_above: 15 },
      "sky.temp_c": { unit: "°C", warn_below: -10, alarm_below: -20 },
      rain: { alarm_if: true },
      mode: { warn_if: "manual" },
    },
  };
  const now = Date.parse("2026-11-27T03:00:00Z");
  for (let i = 0; i < 5_000; i++) {
    const tsMs = now - Math.floor(rand() * 200_000) + 100_000;
    const pick = <T>(xs: T[]): T => xs[Math.floor(rand() * xs.length)]!;
    const data = {
      wind_mps: pick([3, 12, 16, "16 m/s", "3 km/h", undefined]),
      sky: pick([{ temp_c: -5 }, { temp_c: -15 }, { temp_c: "-25 °C" }, {}]),
      rain: pick([true, false, undefined]),
      mode: pick(["manual", "auto"]),
    };
    const ts = new Date(tsMs).toISOString();
    assert.equal(
      quickState(spec, tsMs, data, now),
      judgeType(spec, { ts, data }, now).state,
      `${ts} ${JSON.stringify(data)}`,
    );
  }
});

Deno.test("a type that went stale between two events, unnoticed by any judgement, is latched by the event that ends it", async () => {
  await using dir = await tempDir();
  const now = { wall: Date.parse("2026-11-27T03:00:00Z"), mono: 0 };
  const service = await TelemetryService.open({
    siteDir: join(dir.path, "site"),
    timeZone: "UTC",
    clock: () => now.wall,
    monotonicClock: () => now.mono,
    types: parseTypes(
      JSON.stringify({ weather: { critical: true, stale_after_s: 60, clear_after_s: 30 } }),
      "types.json",
    ),
  });
  try {
    await service.record([{ type: "weather", data: {} }]);
    now.wall += 31_000;
    now.mono += 31_000;
    assert.equal(service.safety().safe, true, service.safety().reasons.join("; "));
    // Stale from 60 s after the event on; nothing judges until the next event at 131 s.
    now.wall += 100_000;
    now.mono += 100_000;
    await service.record([{ type: "weather", data: {} }]);
    const verdict = service.safety();
    assert.equal(verdict.safe, false);
    assert.match(verdict.reasons[0]!, /^weather: clearing, safe at \S+Z \(clear_after_s 30\)$/);
  } finally {
    await service.close();
  }
});

Deno.test("an alarm and its all-clear committed in one group still latch the type", async () => {
  await using dir = await tempDir();
  const mono = { ms: 0 };
  const server = await testServer({
    siteDir: join(dir.path, "site"),
    types: weatherTypes(30),
    monotonicClock: () => mono.ms,
  });
  try {
    await weather(server, 3);
    mono.ms += 31_000; // past the count its first event started
    assert.equal((await safety(server)).safe, true);
    const batch = await postJson(`${server.url}/events`, [
      { type: "weather", data: { wind_mps: 25 } },
      { type: "weather", data: { wind_mps: 2 } },
    ]);
    assert.equal(batch.status, 200);
    const verdict = await safety(server);
    assert.equal(verdict.safe, false);
    assert.equal(verdict.types.weather?.state, "ok");
    assert.ok(verdict.types.weather?.latched_until);
  } finally {
    await server.shutdown();
  }
});
